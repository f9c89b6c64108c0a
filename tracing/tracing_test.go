package tracing_test

import (
	"context"
	"net"
	"sync"
	"testing"

	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/grpc"

	"github.com/seed-c8be168e/runtime-watcher/tracing"
)

// collector is an OTLP/gRPC trace collector that keeps what it receives.
type collector struct {
	collectortrace.UnimplementedTraceServiceServer
	mu    sync.Mutex
	spans map[string]string // span name -> service.name
}

func (c *collector) Export(_ context.Context, req *collectortrace.ExportTraceServiceRequest) (*collectortrace.ExportTraceServiceResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, rs := range req.GetResourceSpans() {
		service := ""
		for _, a := range rs.GetResource().GetAttributes() {
			if a.GetKey() == "service.name" {
				service = a.GetValue().GetStringValue()
			}
		}
		for _, ss := range rs.GetScopeSpans() {
			for _, s := range ss.GetSpans() {
				c.spans[s.GetName()] = service
			}
		}
	}
	return &collectortrace.ExportTraceServiceResponse{}, nil
}

func startCollector(t *testing.T) (*collector, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{spans: map[string]string{}}
	gs := grpc.NewServer()
	collectortrace.RegisterTraceServiceServer(gs, c)
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	return c, lis.Addr().String()
}

// TestExportOverOTLP: with an endpoint (flag or environment) spans reach an
// OTLP/gRPC collector.
func TestExportOverOTLP(t *testing.T) {
	for _, viaEnv := range []bool{false, true} {
		c, addr := startCollector(t)
		o := tracing.Options{Service: "test-service", Getenv: func(string) string { return "" }}
		if viaEnv {
			env := map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://" + addr, "OTEL_EXPORTER_OTLP_TRACES_INSECURE": "true"}
			o.Getenv = func(k string) string { return env[k] }
			for k, v := range env {
				t.Setenv(k, v) // the exporter reads the environment itself
			}
		} else {
			o.Endpoint = "http://" + addr
		}
		tp, err := tracing.Setup(context.Background(), o)
		if err != nil || tp == nil {
			t.Fatalf("Setup: %v, %v", tp, err)
		}
		_, span := tp.Tracer("test").Start(context.Background(), "one span")
		span.End()
		if err := tp.Shutdown(context.Background()); err != nil { // flushes
			t.Fatal(err)
		}
		c.mu.Lock()
		if c.spans["one span"] != "test-service" {
			t.Errorf("via env %v: collector got %v", viaEnv, c.spans)
		}
		c.mu.Unlock()
	}
}

func TestOff(t *testing.T) {
	tp, err := tracing.Setup(context.Background(), tracing.Options{Service: "x", Getenv: func(string) string { return "" }})
	if err != nil || tp != nil {
		t.Fatalf("no endpoint: %v, %v; want no provider", tp, err)
	}
	tp, err = tracing.Setup(context.Background(), tracing.Options{Service: "x", Always: true, Getenv: func(string) string { return "" }})
	if err != nil || tp == nil {
		t.Fatalf("Always: %v, %v; want a provider", tp, err)
	}
	_, span := tp.Tracer("t").Start(context.Background(), "s")
	if !span.SpanContext().IsSampled() || !span.SpanContext().IsValid() {
		t.Errorf("Always without exporter: span context %v, want a valid sampled one", span.SpanContext())
	}
	for _, bad := range []string{"collector:4317", "ftp://x:1", "http://"} {
		if err := tracing.ValidateEndpoint(bad); err == nil {
			t.Errorf("endpoint %q accepted", bad)
		}
	}
}
