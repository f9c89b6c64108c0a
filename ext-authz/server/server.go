// Package server is ext-authz's envoy.service.auth.v3.Authorization gRPC
// service (docs/architecture.md §4.5, §4.1). Check takes the client certificate
// from the x-forwarded-client-cert request header (and
// attributes.source.certificate when present), does SAN pinning through a
// Verifier and answers:
//
//   - allow: status OK, OkHttpResponse setting x-watcher-runtime-id and
//     x-watcher-skr-domain (and, with a Config.Signer, the identity
//     signature x-watcher-identity-signature over them, the method, the path
//     and the time: package identity/assertion) with append_action
//     OVERWRITE_IF_EXISTS_OR_ADD and removing any other client-sent
//     x-watcher-* header;
//   - deny: status PERMISSION_DENIED, DeniedHttpResponse 403 with header
//     x-watcher-deny-reason and a JSON body {"reason","message"};
//   - not ready (cache not synced) or a failed lookup: status UNAVAILABLE
//     and DeniedHttpResponse 503 with reason not-ready, so Envoy answers 503
//     and never allows;
//   - allowed, but the runtime is over its rate limit (Config.Limiter,
//     package ratelimit): status RESOURCE_EXHAUSTED, DeniedHttpResponse 429
//     with Retry-After and reason rate-limited.
//
// Every decision is counted in Prometheus (by result, reason and mode) and
// written to the decision log (package decisionlog: every refusal, allows
// sampled, rate-bounded). Checks selected by DryRun are decided, counted and
// logged with mode dry-run, and allowed whatever the decision.
package server

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/attribute"
	otelcodes "go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
)

// Verifier does SAN pinning; *pinning.Verifier (identity.Verifier) implements it.
type Verifier interface {
	Verify(ctx context.Context, xfccHeader string, sourceCertPEM string) (pinning.Identity, error)
}

// Results of a decision (label "result" of the metrics).
const (
	ResultAllow       = "allow"
	ResultDeny        = "deny"
	ResultUnavailable = "unavailable"
)

// identityHeaderPrefix starts every header ext-authz owns; a client's
// version of any of them never reaches the upstream.
const identityHeaderPrefix = "x-watcher-"

// Modes of a decision (label "mode" of the metrics and field of the
// decision log): enforce answers as decided, dry-run allows whatever was
// decided (DryRun).
const (
	ModeEnforce = "enforce"
	ModeDryRun  = "dry-run"
)

// Metrics are the Prometheus metrics of Check.
type Metrics struct {
	decisions *prometheus.CounterVec
	allows    [2]prometheus.Counter // decisions{result="allow",reason="",mode}, enforce and dry-run, resolved once: the hot path
	latency   prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "runtime_watcher",
			Subsystem: "ext_authz",
			Name:      "decisions_total",
			Help:      "Check decisions by result (allow, deny, unavailable), deny reason and mode (enforce, dry-run: the request was allowed whatever the result).",
		}, []string{"result", "reason", "mode"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "runtime_watcher",
			Subsystem: "ext_authz",
			Name:      "check_duration_seconds",
			Help:      "Time to answer a Check.",
			Buckets:   []float64{5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4, 1e-3, 2.5e-3, 5e-3, 1e-2, 5e-2},
		}),
	}
	for _, c := range []prometheus.Collector{m.decisions, m.latency} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.allows[0] = m.decisions.WithLabelValues(ResultAllow, "", ModeEnforce)
	m.allows[1] = m.decisions.WithLabelValues(ResultAllow, "", ModeDryRun)
	return m, nil
}

// DryRun selects the Checks whose decision is computed, logged and counted
// with mode dry-run, but which are allowed whatever was decided: all of
// them (one ext-authz per gateway in dry-run), or those whose path is one of
// PathPrefixes or below it (a manager's event path, e.g.
// /v1/lifecycle-manager/event; a prefix matches whole path segments only).
type DryRun struct {
	All          bool
	PathPrefixes []string
}

// Match reports whether a Check of path runs in dry-run.
func (d DryRun) Match(path string) bool {
	if d.All {
		return true
	}
	for _, p := range d.PathPrefixes {
		if strings.HasPrefix(path, p) && (len(path) == len(p) || p[len(p)-1] == '/' || path[len(p)] == '/' || path[len(p)] == '?') {
			return true
		}
	}
	return false
}

// Config is what a Server does besides deciding.
type Config struct {
	// Log is the decision log (nil: no lines).
	Log *decisionlog.Log
	// DryRun selects the Checks that are allowed whatever was decided.
	DryRun DryRun
	// Tracer, when set, records a span per Check (child of the request's
	// W3C traceparent) with the decision, reason, runtime and mode. Nil: no
	// span and no traceparent parsing on the Check path.
	Tracer trace.Tracer
	// Signer, when set, signs the identity of every allow
	// (contract.HeaderIdentitySignature) for the listeners and
	// vs-controller's health port to verify (docs/security.md, "Routes
	// cannot speak for a runtime"). Nil: no signature.
	Signer *assertion.Signer
	// Limiter, when set, limits each allowed runtime to its fair share
	// (limit, ratelimited.go). Nil: no limit and no cost.
	Limiter *ratelimit.Limiter
}

// Server implements authv3.AuthorizationServer.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	verifier Verifier
	ready    func() bool
	metrics  *Metrics
	cfg      Config
}

// New returns a Server. ready reports whether the runtime cache has synced;
// until it does, every Check answers 503. metrics may be nil.
func New(v Verifier, ready func() bool, metrics *Metrics, cfg Config) *Server {
	return &Server{verifier: v, ready: ready, metrics: metrics, cfg: cfg}
}

// decision is what decide found.
type decision struct {
	result, reason string
	message        string
	id             pinning.Identity
	err            error // a failed lookup
}

// Check decides one request.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := time.Now()
	httpReq := req.GetAttributes().GetRequest().GetHttp()
	var span trace.Span
	var sender trace.SpanContext // the request's traceparent: a runtime chose it
	if s.cfg.Tracer != nil {
		// A new trace, sampled by ext-authz's own sampler, linked to the
		// sender's span: a traceparent from outside is never a parent
		// (its "not sampled" would hide the Check; its trace ID would put
		// the Check into somebody else's trace).
		sender = trace.SpanContextFromContext(tracing.Propagator.Extract(context.Background(), checkCarrier{httpReq}))
		opts := []trace.SpanStartOption{trace.WithNewRoot(), trace.WithSpanKind(trace.SpanKindServer)}
		if sender.IsValid() {
			opts = append(opts, trace.WithLinks(trace.Link{SpanContext: sender}))
		}
		ctx, span = s.cfg.Tracer.Start(ctx, "ext-authz Check", opts...)
	}
	d := s.decide(ctx, req, httpReq)
	mode, dry := ModeEnforce, s.cfg.DryRun.Match(httpReq.GetPath())
	if dry {
		mode = ModeDryRun
	}
	var resp *authv3.CheckResponse
	if d.result == ResultAllow && s.cfg.Limiter != nil {
		resp = s.limit(&d, start, dry)
	}
	switch {
	case resp != nil: // over the rate limit
	case d.result == ResultAllow:
		resp = allowed(d.id, httpReq, s.sign(d.id, httpReq))
	case dry:
		resp = dryRunAllowed(httpReq)
	case d.result == ResultDeny:
		resp = denied(contract.DenyReason(d.reason), d.message)
	default:
		resp = unavailable(d.message)
	}
	took := time.Since(start)
	if s.metrics != nil {
		if d.result == ResultAllow && d.reason == "" {
			s.metrics.allows[b2i(dry)].Inc()
		} else {
			s.metrics.decisions.WithLabelValues(d.result, d.reason, mode).Inc()
		}
		s.metrics.latency.Observe(took.Seconds())
	}
	if span != nil {
		span.SetAttributes(attribute.String("runtime_watcher.result", d.result), attribute.String("runtime_watcher.reason", d.reason),
			attribute.String("runtime_watcher.runtime", d.id.RuntimeID), attribute.String("runtime_watcher.mode", mode))
		if d.err != nil {
			span.SetStatus(otelcodes.Error, d.err.Error())
		}
		span.End()
	}
	if !rateLimitReason(d.reason) && (d.result != ResultAllow || s.cfg.Log.SampleAllow()) {
		e := &decisionlog.Entry{
			Mode: mode, Result: d.result, Reason: d.reason, Runtime: d.id.RuntimeID, Fingerprint: d.id.Fingerprint,
			Path: httpReq.GetPath(), RequestID: httpReq.GetId(), Message: d.message, Duration: took, Err: d.err,
		}
		if s.cfg.Log.Enabled() {
			if span != nil {
				e.TraceID = trace.SpanContextFromContext(ctx).TraceID().String()
			} else {
				sender = trace.SpanContextFromContext(tracing.Propagator.Extract(context.Background(), checkCarrier{httpReq}))
			}
			if sender.HasTraceID() {
				e.SenderTraceID = sender.TraceID().String()
			}
		}
		s.cfg.Log.Write(e)
	}
	return resp, nil
}

// checkCarrier reads the request headers of a CheckRequest for the W3C
// trace context propagator.
type checkCarrier struct {
	r *authv3.AttributeContext_HttpRequest
}

func (c checkCarrier) Get(key string) string { v, _ := headerValue(c.r, key); return v }
func (c checkCarrier) Set(string, string)    {}
func (c checkCarrier) Keys() []string        { return nil }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Server) decide(ctx context.Context, req *authv3.CheckRequest, httpReq *authv3.AttributeContext_HttpRequest) decision {
	if !s.ready() {
		return decision{result: ResultUnavailable, reason: string(contract.ReasonNotReady), message: "runtime cache not synced yet"}
	}
	header, _ := headerValue(httpReq, contract.HeaderXFCC)
	id, err := s.verifier.Verify(ctx, header, req.GetAttributes().GetSource().GetCertificate())
	if err == nil {
		return decision{result: ResultAllow, id: id}
	}
	if d := (*pinning.Denial)(nil); errors.As(err, &d) {
		return decision{result: ResultDeny, reason: string(d.Reason), message: d.Message, id: id}
	}
	return decision{result: ResultUnavailable, reason: string(contract.ReasonNotReady), message: "runtime lookup failed", id: id, err: err}
}

// headerValue returns a request header by name, from the headers map
// (Envoy's keys are lowercase; any casing is matched so that no spelling
// bypasses the header) and from header_map when Envoy sends raw headers.
// Several values are joined with ',' as Envoy joins repeated headers, so a
// repeated XFCC header reads as several elements.
func headerValue(r *authv3.AttributeContext_HttpRequest, name string) (string, bool) {
	var vals []string
	for k, v := range r.GetHeaders() {
		if strings.EqualFold(k, name) {
			vals = append(vals, v)
		}
	}
	for _, h := range r.GetHeaderMap().GetHeaders() {
		if strings.EqualFold(h.GetKey(), name) {
			v := h.GetValue()
			if v == "" {
				v = string(h.GetRawValue())
			}
			vals = append(vals, v)
		}
	}
	if len(vals) == 1 {
		return vals[0], true
	}
	return strings.Join(vals, ","), len(vals) > 0
}

// sign is the identity signature of an allow ("" without a Signer): over
// the identity and the method and path as Envoy gave them to ext-authz, so
// a route that rewrites the path or sets an identity header after
// ext_authz invalidates it.
func (s *Server) sign(id pinning.Identity, r *authv3.AttributeContext_HttpRequest) string {
	if s.cfg.Signer == nil {
		return ""
	}
	return s.cfg.Signer.Sign(assertion.Claims{RuntimeID: id.RuntimeID, SKRDomain: id.SKRDomain, Method: r.GetMethod(), Path: r.GetPath()})
}

// allowResponse is an allow answer in one allocation: the response and
// every message it points to (nine allocations when built field by field;
// this is the path every event takes).
type allowResponse struct {
	resp    authv3.CheckResponse
	status  rpcstatus.Status
	oneof   authv3.CheckResponse_OkResponse
	ok      authv3.OkHttpResponse
	options [3]corev3.HeaderValueOption
	headers [3]corev3.HeaderValue
	list    [3]*corev3.HeaderValueOption
}

// allowed answers an allow of id; signature, when not "", is set as the
// identity signature header.
func allowed(id pinning.Identity, r *authv3.AttributeContext_HttpRequest, signature string) *authv3.CheckResponse {
	a := new(allowResponse)
	a.status.Code = int32(codes.OK)
	a.headers[0].Key, a.headers[0].Value = contract.HeaderRuntimeID, id.RuntimeID
	a.headers[1].Key, a.headers[1].Value = contract.HeaderSKRDomain, id.SKRDomain
	n := 2
	if signature != "" {
		a.headers[2].Key, a.headers[2].Value = contract.HeaderIdentitySignature, signature
		n = 3
	}
	for i := range n {
		a.options[i].Header = &a.headers[i]
		a.options[i].AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.list[i] = &a.options[i]
	}
	a.ok.Headers = a.list[:n]
	a.ok.HeadersToRemove = clientIdentityHeaders(r, true, signature != "")
	a.oneof.OkResponse = &a.ok
	a.resp.Status = &a.status
	a.resp.HttpResponse = &a.oneof
	return &a.resp
}

// clientIdentityHeaders lists (lowercase) every x-watcher-* header the
// client sent, for Envoy to remove; but the two an allow overwrites when
// allow is true, and the signature header when signed is true too.
func clientIdentityHeaders(r *authv3.AttributeContext_HttpRequest, allow, signed bool) []string {
	var remove []string
	add := func(k string) {
		if len(k) < len(identityHeaderPrefix) || !strings.EqualFold(k[:len(identityHeaderPrefix)], identityHeaderPrefix) {
			return
		}
		lk := strings.ToLower(k)
		overwritten := allow && (lk == contract.HeaderRuntimeID || lk == contract.HeaderSKRDomain || signed && lk == contract.HeaderIdentitySignature)
		if !overwritten {
			remove = append(remove, lk)
		}
	}
	for k := range r.GetHeaders() {
		add(k)
	}
	for _, h := range r.GetHeaderMap().GetHeaders() {
		add(h.GetKey())
	}
	return remove
}

// dryRunAllowed lets a request through that enforce mode would refuse: no
// identity headers (nothing was verified), every client-sent x-watcher-*
// header removed.
func dryRunAllowed(r *authv3.AttributeContext_HttpRequest) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status:       &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{HeadersToRemove: clientIdentityHeaders(r, false, false)}},
	}
}

func denied(reason contract.DenyReason, msg string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: string(reason)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{
			DeniedResponse: denyBody(typev3.StatusCode_Forbidden, reason, msg),
		},
	}
}

func unavailable(msg string) *authv3.CheckResponse {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.Unavailable), Message: string(contract.ReasonNotReady)},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{
			DeniedResponse: denyBody(typev3.StatusCode_ServiceUnavailable, contract.ReasonNotReady, msg),
		},
	}
}

func denyBody(code typev3.StatusCode, reason contract.DenyReason, msg string) *authv3.DeniedHttpResponse {
	body, err := json.Marshal(contract.DenyBody{Reason: reason, Message: msg})
	if err != nil { // a struct of two strings always marshals
		body = []byte(`{"reason":"` + string(reason) + `"}`)
	}
	return &authv3.DeniedHttpResponse{
		Status: &typev3.HttpStatus{Code: code},
		Headers: []*corev3.HeaderValueOption{
			overwrite(contract.HeaderDenyReason, string(reason)),
			overwrite("content-type", "application/json"),
		},
		Body: string(body),
	}
}

func overwrite(key, value string) *corev3.HeaderValueOption {
	return &corev3.HeaderValueOption{
		Header:       &corev3.HeaderValue{Key: key, Value: value},
		AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
	}
}
