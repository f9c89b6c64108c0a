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

// KeyTraceParent is the event object's W3C traceparent: the listener's own
// span (WithTracerProvider), which starts a new trace in the KCP. Kyma's
// listener v2 has no such key; consumers that do not read it are
// unaffected.
const KeyTraceParent = "traceparent"

// KeyLinkedTraceParent is the sender's W3C traceparent as the request
// carried it, when valid. It is a link, never a parent: a runtime chooses
// it (a sender marking "not sampled" would hide the KCP's spans; a chosen
// trace ID would put them into somebody else's trace).
const KeyLinkedTraceParent = "linkedTraceparent"

// traceParentKey is the W3C traceparent header in canonical form, the key
// of http.Header (Header.Get would canonicalize it, allocating, on every
// event).
var traceParentKey = textproto.CanonicalMIMEHeaderKey(KeyTraceParent)

// traceContext reads and writes W3C traceparent and tracestate.
var traceContext propagation.TraceContext

// WithTracerProvider records a span per accepted request ("listener receive
// event"): the root of a new trace, sampled by the provider's own sampler,
// linked to the request's traceparent (the sender's span); the event then
// carries that span's context. Without it the event carries the sender's
// span only as its link and the listener records nothing.
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
// it returns the traceparent the event carries (the listener's span; "" for
// none), the sender's traceparent as a link ("" for none) and the span (nil
// when not tracing).
func (l *Listener) receiveSpan(r *http.Request, runtimeID string) (traceparent, linked string, span trace.Span) {
	if len(r.Header[traceParentKey]) == 0 && l.cfg.tracer == nil {
		return "", "", nil
	}
	sender := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.HeaderCarrier(r.Header)))
	if sender.IsValid() {
		linked = encode(trace.ContextWithRemoteSpanContext(context.Background(), sender))
	}
	if l.cfg.tracer == nil {
		return "", linked, nil
	}
	opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer),
		trace.WithAttributes(attribute.String("runtime_watcher.runtime", runtimeID), attribute.String("runtime_watcher.manager", l.manager))}
	if sender.IsValid() {
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sender}))
	}
	ctx, span := l.cfg.tracer.Start(r.Context(), "listener receive event", opts...)
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceparent = encode(ctx)
	}
	return traceparent, linked, span
}

// encode is ctx's span context as a W3C traceparent.
func encode(ctx context.Context) string {
	c := propagation.MapCarrier{}
	traceContext.Inject(ctx, c)
	return c[KeyTraceParent]
}

// SpanContext is the trace context of the event (invalid when the sender
// sent none).
func spanContextOf(traceparent string) trace.SpanContext {
	if traceparent == "" {
		return trace.SpanContext{}
	}
	return trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier{KeyTraceParent: traceparent}))
}

// ContextWithEvent returns ctx carrying the event's span context (the
// listener's span) as its remote parent, so the operator's spans join the
// listener's trace (ctx unchanged when the event carries none). The
// sender's span is never a parent: link it with Links.
func ContextWithEvent(ctx context.Context, ev Event) context.Context {
	if !ev.SpanContext.IsValid() {
		return ctx
	}
	return trace.ContextWithRemoteSpanContext(ctx, ev.SpanContext)
}

// Links are the span links an operator's span for ev should carry: the
// sender's span (none when the sender sent no valid traceparent). Use them
// as trace.WithLinks(listener.Links(ev)...).
func Links(ev Event) []trace.Link {
	if !ev.Link.IsValid() {
		return nil
	}
	return []trace.Link{{SpanContext: ev.Link}}
}
