package server_test

import (
	"context"
	"strconv"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
)

// startLimited serves a Server whose limiter lets runtime-1 send burst 3
// and then one request per 1000 s (so a test's requests never earn a new
// token), with a decision log of every line.
func startLimited(t *testing.T, mode string, dry server.DryRun) (*fixture, *logLines) {
	t.Helper()
	c := &logLines{}
	f := startWith(t, func(reg *prometheus.Registry) server.Config {
		l, err := decisionlog.New(decisionlog.Options{AllowSampleRate: 1, MaxLinesPerSecond: 1000}, c.logger(), reg)
		if err != nil {
			t.Fatal(err)
		}
		lim, err := ratelimit.New(ratelimit.Config{Mode: mode, Default: ratelimit.Limit{Rate: 0.001, Burst: 3}, Registerer: reg})
		if err != nil {
			t.Fatal(err)
		}
		return server.Config{Log: l, DryRun: dry, Limiter: lim}
	})
	return f, c
}

// A pinned runtime over its limit is answered 429 with Retry-After (whole
// seconds until its next token), reason rate-limited, counted without a
// runtime label and without a decision log line of its own; a refusal of
// pinning is decided first and is not charged to the bucket.
func TestRateLimited(t *testing.T) {
	f, c := startLimited(t, ratelimit.ModeEnforce, server.DryRun{})
	ctx := context.Background()
	check := func(xfccHeader string) *authv3.CheckResponse {
		t.Helper()
		resp, err := f.client.Check(ctx, envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccHeader}))
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	assertDenied(t, check(xfccOf(f.other)), codes.PermissionDenied, typev3.StatusCode_Forbidden, contract.ReasonSANMismatch)
	for i := range 3 {
		if resp := check(xfccOf(f.good)); resp.GetOkResponse() == nil {
			t.Fatalf("request %d of the burst of 3 not allowed: %v", i+1, resp)
		}
	}
	resp := check(xfccOf(f.good))
	assertDenied(t, resp, codes.ResourceExhausted, typev3.StatusCode_TooManyRequests, contract.ReasonRateLimited)
	ra, err := strconv.Atoi(headerMap(resp.GetDeniedResponse().GetHeaders())["retry-after"])
	if err != nil || ra < 998 || ra > 1000 {
		t.Errorf("Retry-After %q, want about 1000 (seconds until the next token)", headerMap(resp.GetDeniedResponse().GetHeaders())["retry-after"])
	}
	check(xfccOf(f.good))
	if got := counter(t, f.reg, server.ResultDeny, string(contract.ReasonRateLimited)); got != 2 {
		t.Errorf("decisions{deny,rate-limited} = %v, want 2", got)
	}
	if got := counter(t, f.reg, server.ResultAllow, ""); got != 3 {
		t.Errorf("decisions{allow} = %v, want 3", got)
	}
	lines, raw := c.get()
	for _, l := range lines {
		if l["reason"] == string(contract.ReasonRateLimited) {
			t.Errorf("a decision log line per limited request: %v", raw)
		}
	}
	if len(lines) != 4 { // the refusal of pinning and the three allows
		t.Errorf("%d decision log lines, want 4: %v", len(lines), raw)
	}
}

// In shadow mode (and for a Check in dry-run) a runtime over its limit is
// allowed with its identity, counted as rate-limited-shadow.
func TestRateLimitedShadow(t *testing.T) {
	for _, tc := range []struct {
		name, mode string
		dry        server.DryRun
		countMode  string
	}{
		{"shadow", ratelimit.ModeShadow, server.DryRun{}, server.ModeEnforce},
		{"dry-run", ratelimit.ModeEnforce, server.DryRun{All: true}, server.ModeDryRun},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, _ := startLimited(t, tc.mode, tc.dry)
			for i := range 5 {
				resp, err := f.client.Check(context.Background(), envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)}))
				if err != nil || headerMap(resp.GetOkResponse().GetHeaders())[contract.HeaderRuntimeID] != "runtime-1" {
					t.Fatalf("request %d: want an allow with the identity, got %v, %v", i+1, resp, err)
				}
			}
			if got := counterMode(t, f.reg, server.ResultAllow, server.ReasonRateLimitedShadow, tc.countMode); got != 2 {
				t.Errorf("decisions{allow,rate-limited-shadow} = %v, want 2", got)
			}
			if got := counterMode(t, f.reg, server.ResultAllow, "", tc.countMode); got != 3 {
				t.Errorf("decisions{allow,\"\"} = %v, want 3", got)
			}
		})
	}
}
