package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
)

// Outcome classifies one delivery attempt.
type Outcome string

// Outcomes of Send.
const (
	// Delivered: the KCP answered 2xx.
	Delivered Outcome = "delivered"
	// Retriable: connection error, timeout, or any status but 2xx and the
	// four below (403 from a cache not yet caught up, 404 from a route not
	// yet programmed, 408, 425, 429, 5xx — 503 among them: the gateway's
	// answer when ext-authz is down or too slow, the mesh config's
	// statusOnError — ...).
	Retriable Outcome = "retry"
	// Rejected: 400, 413, 415 or 422 — the body itself is wrong, retrying it
	// cannot help — or an event that cannot be sent at all.
	Rejected Outcome = "rejected"
)

// Result of one delivery attempt.
type Result struct {
	Outcome    Outcome
	Status     int           // HTTP status; 0 when none was received
	RetryAfter time.Duration // from a Retry-After header (seconds or HTTP date), if any
	Err        error         // transport error or a description of the answer
}

// HTTPSender posts WatchEvents to https://<kcp-addr>/v2/<manager>/event.
type HTTPSender struct {
	base   url.URL
	client func() *http.Client
	tracer trace.Tracer
}

// WithTracer makes every attempt a client span whose W3C traceparent goes
// with the request, so the gateway's ext-authz, the listener and the
// operator see the event in one trace.
func (s *HTTPSender) WithTracer(t trace.Tracer) *HTTPSender {
	s.tracer = t
	return s
}

// maxAnswerBytes bounds how much of an answer is read (to reuse the
// connection and to quote it in logs).
const maxAnswerBytes = 4 << 10

// ParseKCPAddr checks a host[:port] address (no scheme, path or user).
func ParseKCPAddr(addr string) (url.URL, error) {
	u, err := url.Parse("https://" + addr)
	if err != nil {
		return url.URL{}, fmt.Errorf("kcp address %q: %w", addr, err)
	}
	if addr == "" || u.Host != addr || u.Hostname() == "" || u.User != nil || u.Path != "" || u.RawQuery != "" || u.Fragment != "" {
		return url.URL{}, fmt.Errorf("kcp address %q: want host[:port]", addr)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return url.URL{}, fmt.Errorf("kcp address %q: bad port", addr)
		}
	}
	return url.URL{Scheme: "https", Host: addr}, nil
}

// NewHTTPSender sends to kcpAddr (host[:port]) with the client client()
// returns at each attempt, so a rebuilt client (new certificate) is used at
// once.
func NewHTTPSender(kcpAddr string, client func() *http.Client) (*HTTPSender, error) {
	base, err := ParseKCPAddr(kcpAddr)
	if err != nil {
		return nil, err
	}
	return &HTTPSender{base: base, client: client}, nil
}

// Send posts one event; ctx bounds the attempt.
func (s *HTTPSender) Send(ctx context.Context, manager string, ev contract.WatchEvent) Result {
	if !contract.ValidManager(manager) {
		return Result{Outcome: Rejected, Err: fmt.Errorf("invalid manager %q", manager)}
	}
	body, err := json.Marshal(ev)
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	u := s.base
	u.Path = contract.EventPath(manager)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	if s.tracer != nil {
		var span trace.Span
		ctx, span = s.tracer.Start(ctx, "skr-webhook send event", trace.WithSpanKind(trace.SpanKindClient), trace.WithAttributes(
			attribute.String("runtime_watcher.manager", manager),
			attribute.String("runtime_watcher.watched", ev.Watched.Namespace+"/"+ev.Watched.Name),
			attribute.String("runtime_watcher.watched_kind", ev.WatchedGvk.Kind),
			attribute.String("runtime_watcher.resync", string(ev.Resync)),
			attribute.Bool("runtime_watcher.heartbeat", ev.Heartbeat)))
		defer span.End()
		req = req.WithContext(ctx)
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(req.Header))
		r := s.do(req)
		span.SetAttributes(attribute.Int("http.response.status_code", r.Status), attribute.String("runtime_watcher.outcome", string(r.Outcome)))
		if r.Outcome != Delivered {
			span.SetStatus(codes.Error, errString(r.Err))
		}
		return r
	}
	return s.do(req)
}

// do sends req and classifies the answer.
func (s *HTTPSender) do(req *http.Request) Result {
	resp, err := s.client().Do(req)
	if err != nil {
		return Result{Outcome: Retriable, Err: err}
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	r := Result{Status: resp.StatusCode}
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		r.Outcome = Delivered
		return r
	case BadBody(resp.StatusCode):
		r.Outcome = Rejected
	default:
		r.Outcome = Retriable
		r.RetryAfter = retryAfter(resp.Header.Get("Retry-After"), time.Now())
	}
	r.Err = fmt.Errorf("kcp answered %d: %q", resp.StatusCode, answer)
	return r
}

// BadBody reports whether a KCP answer says the body itself is wrong (400,
// 413, 415, 422): such an event is dropped and counted, not retried.
func BadBody(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge, http.StatusUnsupportedMediaType,
		http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// maxRetryAfter bounds what a Retry-After header is read as; the
// dispatcher caps it further at its largest retry delay.
const maxRetryAfter = time.Hour

// retryAfter reads a Retry-After value: delay-seconds or an HTTP date
// (RFC 9110 §10.2.3); 0 when absent, unreadable or in the past.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	if s, err := strconv.ParseInt(v, 10, 64); err == nil {
		if s <= 0 {
			return 0
		}
		return min(time.Duration(min(s, int64(maxRetryAfter/time.Second)))*time.Second, maxRetryAfter)
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, maxRetryAfter)
		}
	}
	return 0
}
