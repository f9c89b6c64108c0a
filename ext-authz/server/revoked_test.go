package server_test

import (
	"context"
	"testing"
	"time"

	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
)

// TestRevoked: a certificate its runtime's Kyma retired is answered 403
// with reason revoked, counted under that reason and logged with it.
func TestRevoked(t *testing.T) {
	f, c := startLogged(t, decisionlog.Options{AllowSampleRate: 0, MaxLinesPerSecond: 1000}, server.DryRun{})
	rt := f.lookup.runtimes["runtime-1"]
	rt.Retired = pinning.RetirementOf(contract.Retirement{IssuedBefore: f.good.Cert.NotBefore.Add(time.Second), From: time.Now().Add(-time.Second)}.String())
	f.lookup.runtimes["runtime-1"] = rt
	resp, err := f.client.Check(context.Background(), envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)}))
	if err != nil {
		t.Fatal(err)
	}
	assertDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, contract.ReasonRevoked)
	if n := counter(t, f.reg, server.ResultDeny, string(contract.ReasonRevoked)); n != 1 {
		t.Errorf("decisions_total{reason=revoked} = %v, want 1", n)
	}
	lines, raw := c.get()
	if len(lines) != 1 || lines[0]["reason"] != string(contract.ReasonRevoked) || lines[0]["runtime"] != "runtime-1" {
		t.Errorf("decision log: %v", raw)
	}
}
