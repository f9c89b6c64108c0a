package server_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// mapLookup is a RuntimeLookup over fixed runtimes; the cache-backed one is
// exercised by the integration suite against a real API server.
type mapLookup struct {
	runtimes map[string]identity.Runtime
	fail     atomic.Bool
}

func (m *mapLookup) LookupRuntime(_ context.Context, id string) (identity.Runtime, bool, error) {
	if m.fail.Load() {
		return identity.Runtime{}, false, errors.New("cache broken")
	}
	rt, ok := m.runtimes[id]
	return rt, ok, nil
}

type fixture struct {
	client  authv3.AuthorizationClient
	ready   *atomic.Bool
	lookup  *mapLookup
	reg     *prometheus.Registry
	good    *pki.Leaf
	other   *pki.Leaf
	unknown *pki.Leaf
}

// start serves a Server on a real loopback gRPC listener.
func start(t *testing.T) *fixture {
	t.Helper()
	return startWith(t, func(*prometheus.Registry) server.Config { return server.Config{} })
}

// startWith is start with the Config cfg returns (given the registry).
func startWith(t *testing.T, cfg func(*prometheus.Registry) server.Config) *fixture {
	t.Helper()
	ca, err := pki.NewCA("server-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(cn, dns string) *pki.Leaf {
		l, err := ca.Issue(pki.LeafOptions{CommonName: cn, DNSNames: []string{dns}})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	f := &fixture{
		ready:   &atomic.Bool{},
		lookup:  &mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {ID: "runtime-1", SKRDomain: "SKR1.Example.com."}}},
		reg:     prometheus.NewRegistry(),
		good:    issue("runtime-1", "skr1.example.com"),
		other:   issue("runtime-1", "skr2.example.com"),
		unknown: issue("runtime-x", "skr1.example.com"),
	}
	f.ready.Store(true)
	m, err := server.NewMetrics(f.reg)
	if err != nil {
		t.Fatal(err)
	}
	srv := server.New(&identity.Verifier{Lookup: f.lookup}, f.ready.Load, m, cfg(f.reg))

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, srv)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	f.client = authv3.NewAuthorizationClient(conn)
	return f
}

func xfccOf(l *pki.Leaf) string {
	return `Hash=1;Cert="` + xfcc.EncodeCert(l.CertPEM) + `";Subject="CN=` + l.Cert.Subject.CommonName + `";URI=;DNS=` + l.Cert.DNSNames[0]
}

// envoyRequest decodes a CheckRequest fixture (protobuf JSON as Envoy sends
// it) and sets the given request headers on it.
func envoyRequest(t *testing.T, fixture string, headers map[string]string) *authv3.CheckRequest {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("testdata", "opa-envoy", fixture))
	if err != nil {
		t.Fatal(err)
	}
	req := &authv3.CheckRequest{}
	if err := protojson.Unmarshal(raw, req); err != nil {
		t.Fatal(err)
	}
	h := req.GetAttributes().GetRequest().GetHttp()
	if h.Headers == nil {
		h.Headers = map[string]string{}
	}
	for k, v := range headers {
		h.Headers[k] = v
	}
	return req
}

func headerMap(opts []*corev3.HeaderValueOption) map[string]string {
	m := map[string]string{}
	for _, o := range opts {
		m[o.GetHeader().GetKey()] = o.GetHeader().GetValue()
	}
	return m
}

func TestCheckAllow(t *testing.T) {
	f := start(t)
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{
		contract.HeaderXFCC: xfccOf(f.good),
		// Headers a client sends to impersonate a runtime never survive.
		contract.HeaderRuntimeID:  "runtime-evil",
		contract.HeaderSKRDomain:  "evil.example.com",
		contract.HeaderDenyReason: "none",
		"x-watcher-extra":         "x",
		"X-Watcher-Mixed":         "x", // any casing (Envoy lowercases; a test client need not)
		"x-watcher":               "x", // shorter than the prefix
	})
	resp, err := f.client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK {
		t.Fatalf("status %v: %v", resp.GetStatus(), resp)
	}
	ok := resp.GetOkResponse()
	if ok == nil {
		t.Fatalf("no ok_response: %v", resp)
	}
	for _, h := range ok.GetHeaders() {
		//nolint:staticcheck // SA1019: checks that the deprecated append field stays unset
		if h.GetAppendAction() != corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD || h.GetAppend() != nil {
			t.Errorf("header %s: append_action %v, append %v", h.GetHeader().GetKey(), h.GetAppendAction(), h.GetAppend())
		}
	}
	want := map[string]string{contract.HeaderRuntimeID: "runtime-1", contract.HeaderSKRDomain: "skr1.example.com"}
	if got := headerMap(ok.GetHeaders()); len(got) != 2 || got[contract.HeaderRuntimeID] != want[contract.HeaderRuntimeID] || got[contract.HeaderSKRDomain] != want[contract.HeaderSKRDomain] {
		t.Errorf("headers %v, want %v", got, want)
	}
	removed := strings.Join(ok.GetHeadersToRemove(), ",")
	for _, h := range []string{contract.HeaderDenyReason, "x-watcher-extra", "x-watcher-mixed"} {
		if !strings.Contains(removed, h) {
			t.Errorf("client header %s not removed (removed: %s)", h, removed)
		}
	}
	// The wire form carries append_action explicitly.
	js, _ := protojson.Marshal(resp)
	if !strings.Contains(string(js), `"appendAction":"OVERWRITE_IF_EXISTS_OR_ADD"`) {
		t.Errorf("append_action missing from %s", js)
	}
	if got := counter(t, f.reg, server.ResultAllow, ""); got != 1 {
		t.Errorf("allow counter %v, want 1", got)
	}
}

func TestCheckDeny(t *testing.T) {
	f := start(t)
	tests := []struct {
		name    string
		fixture string
		headers map[string]string
		source  string
		want    contract.DenyReason
	}{
		{name: "Envoy request without XFCC", fixture: "example_allowed_request.json", want: contract.ReasonMissingClientCert},
		{name: "SPIFFE principal only (never an identity)", fixture: "spiffe_principal.json", want: contract.ReasonMissingClientCert},
		{name: "raw body with an identity claim only", fixture: "raw_body.json", headers: map[string]string{contract.HeaderRuntimeID: "runtime-1"}, want: contract.ReasonMissingClientCert},
		{name: "forged second element", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: xfccOf(f.good) + "," + xfccOf(f.other)}, want: contract.ReasonMalformedXFCC},
		{name: "XFCC in another casing too", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: xfccOf(f.other), "X-Forwarded-Client-Cert": xfccOf(f.good)}, want: contract.ReasonMalformedXFCC},
		{name: "garbage certificate", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: `Cert="foobar"`}, want: contract.ReasonInvalidCertificate},
		{name: "unknown runtime", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: xfccOf(f.unknown)}, want: contract.ReasonUnknownRuntime},
		{name: "SAN mismatch with forged DNS pair", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: xfccOf(f.other) + ";DNS=skr1.example.com"}, want: contract.ReasonSANMismatch},
		{name: "source certificate differs", fixture: "example_allowed_request.json", headers: map[string]string{contract.HeaderXFCC: xfccOf(f.good)}, source: xfcc.EncodeCert(f.other.CertPEM), want: contract.ReasonCertificateMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := envoyRequest(t, tt.fixture, tt.headers)
			if tt.source != "" {
				req.Attributes.Source = &authv3.AttributeContext_Peer{Certificate: tt.source}
			}
			resp, err := f.client.Check(context.Background(), req)
			if err != nil {
				t.Fatal(err)
			}
			assertDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, tt.want)
			if got := counter(t, f.reg, server.ResultDeny, string(tt.want)); got < 1 {
				t.Errorf("deny counter for %s is %v", tt.want, got)
			}
		})
	}
}

func TestCheckRawHeaderMap(t *testing.T) {
	f := start(t)
	req := envoyRequest(t, "raw_body.json", nil)
	req.Attributes.Request.Http.Headers = nil
	req.Attributes.Request.Http.HeaderMap = &corev3.HeaderMap{Headers: []*corev3.HeaderValue{
		{Key: "content-type", RawValue: []byte("application/json")},
		{Key: contract.HeaderXFCC, RawValue: []byte(xfccOf(f.good))},
	}}
	resp, err := f.client.Check(context.Background(), req)
	if err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("raw header_map: want allow, got %v, %v", resp, err)
	}
	// Two XFCC headers in header_map are two elements.
	req.Attributes.Request.Http.HeaderMap.Headers = append(req.Attributes.Request.Http.HeaderMap.Headers,
		&corev3.HeaderValue{Key: contract.HeaderXFCC, RawValue: []byte(xfccOf(f.other))})
	resp, err = f.client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	assertDenied(t, resp, codes.PermissionDenied, typev3.StatusCode_Forbidden, contract.ReasonMalformedXFCC)
}

func TestCheckUnavailable(t *testing.T) {
	f := start(t)
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)})

	f.ready.Store(false)
	resp, err := f.client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	assertDenied(t, resp, codes.Unavailable, typev3.StatusCode_ServiceUnavailable, contract.ReasonNotReady)

	f.ready.Store(true)
	f.lookup.fail.Store(true)
	resp, err = f.client.Check(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	assertDenied(t, resp, codes.Unavailable, typev3.StatusCode_ServiceUnavailable, contract.ReasonNotReady)
	if got := counter(t, f.reg, server.ResultUnavailable, string(contract.ReasonNotReady)); got != 2 {
		t.Errorf("unavailable counter %v, want 2", got)
	}

	f.lookup.fail.Store(false)
	if resp, err = f.client.Check(context.Background(), req); err != nil || resp.GetOkResponse() == nil {
		t.Fatalf("after recovery: want allow, got %v, %v", resp, err)
	}
}

func assertDenied(t *testing.T, resp *authv3.CheckResponse, code codes.Code, httpCode typev3.StatusCode, reason contract.DenyReason) {
	t.Helper()
	if codes.Code(resp.GetStatus().GetCode()) != code {
		t.Fatalf("status %v, want %v (%v)", codes.Code(resp.GetStatus().GetCode()), code, resp)
	}
	if resp.GetOkResponse() != nil {
		t.Fatalf("denial carries an ok_response: %v", resp)
	}
	d := resp.GetDeniedResponse()
	if d.GetStatus().GetCode() != httpCode {
		t.Fatalf("HTTP status %v, want %v", d.GetStatus().GetCode(), httpCode)
	}
	h := headerMap(d.GetHeaders())
	if h[contract.HeaderDenyReason] != string(reason) || h["content-type"] != "application/json" {
		t.Fatalf("headers %v, want reason %s", h, reason)
	}
	var body contract.DenyBody
	if err := json.Unmarshal([]byte(d.GetBody()), &body); err != nil || body.Reason != reason || body.Message == "" {
		t.Fatalf("body %q (%v), want reason %s with a message", d.GetBody(), err, reason)
	}
}

// counter reads the decisions counter for result and reason in enforce mode.
func counter(t *testing.T, reg *prometheus.Registry, result, reason string) float64 {
	t.Helper()
	return counterMode(t, reg, result, reason, server.ModeEnforce)
}

func counterMode(t *testing.T, reg *prometheus.Registry, result, reason, mode string) float64 {
	t.Helper()
	got, err := promtext.Gathered(reg, "runtime_watcher_ext_authz_decisions_total", "result", "reason", "mode")
	if err != nil {
		t.Fatal(err)
	}
	return got[result+"/"+reason+"/"+mode]
}
