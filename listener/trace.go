package listener

import (
	"context"
	"errors"
	"net/http"
	"net/textproto"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// KeyTraceParent is the event object's W3C traceparent (docs: the sender's
// trace, or the listener's span in it with WithTracerProvider); set only
// when the request carried a valid traceparent. Kyma's listener v2 has no
// such key; consumers that do not read it are unaffected.
const KeyTraceParent = "traceparent"

// traceParentKey is the W3C traceparent header in canonical form, the key
// of http.Header (Header.Get would canonicalize it, allocating, on every
// event).
var traceParentKey = textproto.CanonicalMIMEHeaderKey(KeyTraceParent)

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// WithTracerProvider records a span per accepted request ("listener receive
// event"), a child of the request's traceparent; the event then carries that
// span's context. Without it the event carries the request's own
// traceparent (the sender's span) and the listener records nothing.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) error {
		if tp == nil {
			return errors.New("WithTracerProvider: nil provider")
		}
		c.tracer = tp.Tracer("github.com/seed-c8be168e/runtime-watcher/listener")
		return nil
	}
}

// receiveSpan starts the listener's span of a request when tracing is on;
// it returns the traceparent the event carries ("" for none) and the span
// (nil when not tracing).
func (l *Listener) receiveSpan(r *http.Request, runtimeID string) (string, trace.Span) {
	if len(r.Header[traceParentKey]) == 0 && l.cfg.tracer == nil {
		return "", nil
	}
	ctx := traceContext.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	var span trace.Span
	if l.cfg.tracer != nil {
		ctx, span = l.cfg.tracer.Start(ctx, "listener receive event", trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(attribute.String("runtime_watcher.runtime", runtimeID), attribute.String("runtime_watcher.manager", l.manager)))
	}
	if !trace.SpanContextFromContext(ctx).IsValid() {
		return "", span
	}
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c[KeyTraceParent], span
}

// SpanContext is the trace context of the event (invalid when the sender
// sent none).
func spanContextOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier{KeyTraceParent: traceparent}))
}

// ContextWithEvent returns ctx carrying the event's span context as its
// remote parent, so the operator's spans for obj join the sender's trace
// (ctx unchanged when obj carries none).
func ContextWithEvent(ctx context.Context, ev Event) context.Context {
	if !ev.SpanContext.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, ev.SpanContext)
}
