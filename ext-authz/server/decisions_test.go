package server_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"sync"
	"testing"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// logLines collects the decision log's JSON lines (Checks run on gRPC's
// goroutines).
type logLines struct {
	mu    sync.Mutex
	lines []map[string]any
	raw   []string
}

func (c *logLines) logger() logr.Logger {
	return funcr.NewJSON(func(obj string) {
		m := map[string]any{}
		_ = json.Unmarshal([]byte(obj), &m)
		c.mu.Lock()
		defer c.mu.Unlock()
		c.lines, c.raw = append(c.lines, m), append(c.raw, obj)
	}, funcr.Options{})
}

func (c *logLines) get() ([]map[string]any, []string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]map[string]any(nil), c.lines...), append([]string(nil), c.raw...)
}

func startLogged(t *testing.T, o decisionlog.Options, dry server.DryRun) (*fixture, *logLines) {
	t.Helper()
	c := &logLines{}
	f := startWith(t, func(reg *prometheus.Registry) server.Config {
		l, err := decisionlog.New(o, c.logger(), reg)
		if err != nil {
			t.Fatal(err)
		}
		return server.Config{Log: l, DryRun: dry}
	})
	return f, c
}

func TestDecisionLog(t *testing.T) {
	f, c := startLogged(t, decisionlog.Options{AllowSampleRate: 0, MaxLinesPerSecond: 1000}, server.DryRun{})
	ctx := context.Background()
	traceparent := "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	for range 3 { // allows are not sampled at rate 0
		if resp, err := f.client.Check(ctx, envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)})); err != nil || resp.GetOkResponse() == nil {
			t.Fatalf("want allow: %v %v", resp, err)
		}
	}
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.other), "traceparent": traceparent})
	req.Attributes.Request.Http.Path = "/v1/lifecycle-manager/event"
	if _, err := f.client.Check(ctx, req); err != nil {
		t.Fatal(err)
	}
	lines, raw := c.get()
	if len(lines) != 1 {
		t.Fatalf("%d lines, want the denial only: %v", len(lines), raw)
	}
	fp := sha256.Sum256(f.other.Cert.Raw)
	want := map[string]any{"mode": "enforce", "result": "deny", "reason": string(contract.ReasonSANMismatch), "runtime": "runtime-1",
		"certSHA256": hex.EncodeToString(fp[:]), "path": "/v1/lifecycle-manager/event", "senderTraceID": "4bf92f3577b34da6a3ce929d0e0e4736"}
	if lines[0]["traceID"] != nil {
		t.Errorf("traceID %v without tracing: the sender's trace is no trace of ext-authz's", lines[0]["traceID"])
	}
	for k, v := range want {
		if lines[0][k] != v {
			t.Errorf("%s = %v, want %v", k, lines[0][k], v)
		}
	}
	if d, ok := lines[0]["durationSeconds"].(float64); !ok || d <= 0 {
		t.Errorf("durationSeconds %v", lines[0]["durationSeconds"])
	}
	// The certificate itself never reaches the log, in any encoding.
	for _, s := range []string{xfcc.EncodeCert(f.other.CertPEM)[:40], string(f.other.CertPEM[30:70])} {
		if strings.Contains(raw[0], s) {
			t.Errorf("log line carries the certificate (%q): %s", s, raw[0])
		}
	}
}

func TestDecisionLogSamplesAllows(t *testing.T) {
	f, c := startLogged(t, decisionlog.Options{AllowSampleRate: 1, MaxLinesPerSecond: 1000}, server.DryRun{})
	if _, err := f.client.Check(context.Background(), envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)})); err != nil {
		t.Fatal(err)
	}
	lines, raw := c.get()
	if len(lines) != 1 || lines[0]["result"] != "allow" || lines[0]["runtime"] != "runtime-1" || lines[0]["reason"] != nil {
		t.Fatalf("want one allow line with the runtime: %v", raw)
	}
}

func TestDryRun(t *testing.T) {
	f, c := startLogged(t, decisionlog.Options{AllowSampleRate: 0, MaxLinesPerSecond: 1000}, server.DryRun{PathPrefixes: []string{"/v1/dry"}})
	ctx := context.Background()
	check := func(path, xfccHeader string) *authv3.CheckResponse {
		t.Helper()
		req := envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccHeader,
			contract.HeaderRuntimeID: "runtime-evil", "x-watcher-skr-domain": "evil.example.com"})
		req.Attributes.Request.Http.Path = path
		resp, err := f.client.Check(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	// A refusal on a dry-run path is allowed, without identity headers and
	// with the client's x-watcher-* headers removed.
	resp := check("/v1/dry/event", xfccOf(f.other))
	ok := resp.GetOkResponse()
	if codes.Code(resp.GetStatus().GetCode()) != codes.OK || ok == nil {
		t.Fatalf("dry-run refusal not allowed: %v", resp)
	}
	if len(ok.GetHeaders()) != 0 {
		t.Errorf("dry-run allow sets identity headers %v", ok.GetHeaders())
	}
	if removed := strings.Join(ok.GetHeadersToRemove(), ","); !strings.Contains(removed, contract.HeaderRuntimeID) || !strings.Contains(removed, contract.HeaderSKRDomain) {
		t.Errorf("client identity headers not removed: %s", removed)
	}
	if got := counterMode(t, f.reg, server.ResultDeny, string(contract.ReasonSANMismatch), server.ModeDryRun); got != 1 {
		t.Errorf("dry-run deny counter %v, want 1", got)
	}
	// Not ready: allowed in dry-run, 503 elsewhere.
	f.ready.Store(false)
	if resp := check("/v1/dry", xfccOf(f.good)); resp.GetOkResponse() == nil {
		t.Errorf("dry-run not-ready: %v", resp)
	}
	assertDenied(t, check("/v1/other", xfccOf(f.good)), codes.Unavailable, typev3.StatusCode_ServiceUnavailable, contract.ReasonNotReady)
	f.ready.Store(true)
	// An allow on a dry-run path is a normal allow, counted as dry-run.
	if h := headerMap(check("/v1/dry/event", xfccOf(f.good)).GetOkResponse().GetHeaders()); h[contract.HeaderRuntimeID] != "runtime-1" {
		t.Errorf("dry-run allow: headers %v", h)
	}
	if got := counterMode(t, f.reg, server.ResultAllow, "", server.ModeDryRun); got != 1 {
		t.Errorf("dry-run allow counter %v, want 1", got)
	}
	// Outside the prefix (also a path that only starts with its letters) it enforces.
	for _, p := range []string{"/v1/other/event", "/v1/dryer/event"} {
		assertDenied(t, check(p, xfccOf(f.other)), codes.PermissionDenied, typev3.StatusCode_Forbidden, contract.ReasonSANMismatch)
	}
	if got := counterMode(t, f.reg, server.ResultDeny, string(contract.ReasonSANMismatch), server.ModeEnforce); got != 2 {
		t.Errorf("enforce deny counter %v, want 2", got)
	}
	lines, raw := c.get()
	modes := map[string]int{}
	for _, l := range lines {
		modes[l["mode"].(string)+"/"+l["result"].(string)]++
	}
	if modes["dry-run/deny"] != 1 || modes["dry-run/unavailable"] != 1 || modes["enforce/unavailable"] != 1 || modes["enforce/deny"] != 2 {
		t.Errorf("log lines by mode/result %v: %v", modes, raw)
	}
}

func TestDryRunMatch(t *testing.T) {
	d := server.DryRun{PathPrefixes: []string{"/v1/lifecycle-manager", "/v2/"}}
	for path, want := range map[string]bool{
		"/v1/lifecycle-manager":          true,
		"/v1/lifecycle-manager/event":    true,
		"/v1/lifecycle-manager?x=1":      true,
		"/v1/lifecycle-manager-evil/evt": false,
		"/v1/lifecycle-manage":           false,
		"/v2/x":                          true,
		"/v2":                            false,
		"":                               false,
	} {
		if got := d.Match(path); got != want {
			t.Errorf("Match(%q) = %v, want %v", path, got, want)
		}
	}
	if !(server.DryRun{All: true}).Match("/anything") {
		t.Error("All does not match")
	}
}

// TestDecisionLogAllowAllocations keeps the allow path at the allocations of
// the log off when the allow is not sampled.
func TestDecisionLogAllowAllocations(t *testing.T) {
	f := start(t) // for its certificates and lookup
	m, err := server.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	l, err := decisionlog.New(decisionlog.Options{AllowSampleRate: 0, MaxLinesPerSecond: 100}, logr.Discard(), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.good)})
	allocs := func(cfg server.Config) float64 {
		srv := server.New(&identity.Verifier{Lookup: f.lookup}, func() bool { return true }, m, cfg)
		return testing.AllocsPerRun(200, func() {
			if resp, _ := srv.Check(context.Background(), req); resp.GetOkResponse() == nil {
				t.Fatal("not allowed")
			}
		})
	}
	off, on := allocs(server.Config{}), allocs(server.Config{Log: l, DryRun: server.DryRun{PathPrefixes: []string{"/v1/other"}}})
	if on != off {
		t.Errorf("allow with the decision log on (not sampled) and a dry-run path: %v allocations, log off: %v", on, off)
	}
}

// TestCheckSpan: with a tracer, a Check is the root span of a new trace,
// sampled by ext-authz's own sampler, linked to the request's W3C
// traceparent (issue 33: a sender's traceparent was its parent, so a sender
// marking "not sampled" hid the Check, and a chosen trace ID put it into
// somebody else's trace), carrying the decision.
func TestCheckSpan(t *testing.T) {
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	f := startWith(t, func(*prometheus.Registry) server.Config {
		return server.Config{Tracer: tp.Tracer("test"), DryRun: server.DryRun{PathPrefixes: []string{"/dry"}}}
	})
	// The sender marks its trace "not sampled" (flags 00).
	req := envoyRequest(t, "example_allowed_request.json", map[string]string{contract.HeaderXFCC: xfccOf(f.other),
		"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"})
	req.Attributes.Request.Http.Path = "/dry/event"
	if _, err := f.client.Check(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	spans := rec.Ended()
	if len(spans) != 1 {
		t.Fatalf("%d spans, want 1 (the sender's \"not sampled\" does not hide the Check)", len(spans))
	}
	s := spans[0]
	if s.SpanContext().TraceID().String() == "4bf92f3577b34da6a3ce929d0e0e4736" || s.Parent().IsValid() {
		t.Errorf("span %v with parent %v: in the sender's trace, want a new root", s.SpanContext(), s.Parent())
	}
	if l := s.Links(); len(l) != 1 || l[0].SpanContext.TraceID().String() != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		l[0].SpanContext.SpanID().String() != "00f067aa0ba902b7" {
		t.Errorf("links %v, want the sender's span", l)
	}
	attrs := map[string]string{}
	for _, a := range s.Attributes() {
		attrs[string(a.Key)] = a.Value.String()
	}
	if attrs["runtime_watcher.result"] != "deny" || attrs["runtime_watcher.reason"] != string(contract.ReasonSANMismatch) ||
		attrs["runtime_watcher.runtime"] != "runtime-1" || attrs["runtime_watcher.mode"] != "dry-run" {
		t.Errorf("span attributes %v", attrs)
	}
}
