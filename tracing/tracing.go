// Package tracing sets up OpenTelemetry tracing for the binaries (ext-authz,
// skr-webhook): spans exported over OTLP/gRPC when an endpoint is configured
// — a flag, or the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT /
// OTEL_EXPORTER_OTLP_ENDPOINT environment variables (with the other
// OTEL_EXPORTER_OTLP_* settings the exporter reads) — and nothing at all
// otherwise: Setup returns a nil provider and the callers create no span.
//
// Context crosses processes as W3C trace context (traceparent, tracestate;
// Propagator).
package tracing

import (
	"context"
	"errors"
	"fmt"
	"net/url"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/seed-c8be168e/runtime-watcher/version"
)

// Propagator reads and writes W3C traceparent and tracestate.
var Propagator propagation.TextMapPropagator = propagation.TraceContext{}

// Options configure Setup.
type Options struct {
	// Endpoint is the OTLP/gRPC collector, http://host:port (plaintext) or
	// https://host:port; empty: the standard environment variables decide.
	Endpoint string
	// Service is the service.name of the spans.
	Service string
	// Always returns a provider also without an exporter: its spans are
	// sampled and go nowhere, so that the trace context sent downstream
	// starts a trace the next hop records (skr-webhook).
	Always bool
	// Getenv reads the environment (os.Getenv).
	Getenv func(string) string
}

// ValidateEndpoint checks an endpoint flag value.
func ValidateEndpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	if err != nil {
		return err
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%q: want http://host:port or https://host:port", endpoint)
	}
	return nil
}

// Exporting reports whether spans are exported: an endpoint is configured.
func (o Options) Exporting() bool {
	if o.Endpoint != "" {
		return true
	}
	return o.Getenv != nil && (o.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != "" || o.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "")
}

// Setup returns the tracer provider, nil when tracing is off (not
// Exporting, not Always). Shut it down to flush the spans.
func Setup(ctx context.Context, o Options) (*sdktrace.TracerProvider, error) {
	if err := ValidateEndpoint(o.Endpoint); err != nil {
		return nil, err
	}
	if !o.Exporting() && !o.Always {
		return nil, nil
	}
	if o.Service == "" {
		return nil, errors.New("tracing: no service name")
	}
	opts := []sdktrace.TracerProviderOption{
		sdktrace.WithResource(resource.NewWithAttributes("",
			attribute.String("service.name", o.Service), attribute.String("service.version", version.Get()))),
		// A caller's sampling decision wins; a trace that starts here is sampled.
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.AlwaysSample())),
	}
	if o.Exporting() {
		var eo []otlptracegrpc.Option
		if o.Endpoint != "" {
			eo = append(eo, otlptracegrpc.WithEndpointURL(o.Endpoint))
		}
		exp, err := otlptracegrpc.New(ctx, eo...)
		if err != nil {
			return nil, fmt.Errorf("OTLP trace exporter: %w", err)
		}
		opts = append(opts, sdktrace.WithBatcher(exp))
	}
	return sdktrace.NewTracerProvider(opts...), nil
}
