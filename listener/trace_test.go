package listener

import (
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// FuzzLinkedTraceParent: whatever traceparent a sender puts on an event
// (issue 33: a runtime chooses it), the listener's span is the root of a
// new trace that never takes the sender's trace ID or sampling flag, the
// sender's span is at most a link, and the event's link reads back as the
// link the span carries.
func FuzzLinkedTraceParent(f *testing.F) {
	for _, s := range []string{
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00",
		"00-00000000000000000000000000000000-00f067aa0ba902b7-01",
		"ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-extra",
		"", "00--", "garbage",
	} {
		f.Add(s)
	}
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	traced := &Listener{manager: "m"}
	traced.cfg.tracer = tp.Tracer("fuzz")
	plain := &Listener{manager: "m"}
	f.Fuzz(func(t *testing.T, header string) {
		r := httptest.NewRequest("POST", "/v2/m/event", nil)
		r.Header[traceParentKey] = []string{header}
		tp1, linked, span := traced.receiveSpan(r, "runtime-1")
		if span == nil {
			t.Fatal("no span with a tracer")
		}
		span.End()
		own := spanContextOf(tp1)
		link := spanContextOf(linked)
		if !own.IsValid() || !own.IsSampled() {
			t.Fatalf("the listener's span %v: want a valid, sampled span of its own", own)
		}
		if link.IsValid() && own.TraceID() == link.TraceID() {
			t.Fatalf("the listener's span is in the sender's trace %v", link.TraceID())
		}
		got := span.(sdktrace.ReadOnlySpan)
		if got.Parent().IsValid() {
			t.Fatalf("the listener's span has the parent %v", got.Parent())
		}
		switch l := got.Links(); {
		case link.IsValid() && (len(l) != 1 || l[0].SpanContext.TraceID() != link.TraceID() || l[0].SpanContext.SpanID() != link.SpanID()):
			t.Fatalf("links %v, want the sender's span %v", l, link)
		case !link.IsValid() && len(l) != 0:
			t.Fatalf("links %v without a valid sender span", l)
		}
		// Without a tracer: no span, the same link, no traceparent.
		tp2, linked2, span2 := plain.receiveSpan(r, "runtime-1")
		if span2 != nil || tp2 != "" || linked2 != linked {
			t.Fatalf("without a tracer: traceparent %q, link %q (want %q), span %v", tp2, linked2, linked, span2)
		}
		rec.Reset()
	})
}
