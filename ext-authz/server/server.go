// Package server is ext-authz's envoy.service.auth.v3.Authorization gRPC
// service (docs/architecture.md §4.5, §4.1). Check takes the client certificate
// from the x-forwarded-client-cert request header (and
// attributes.source.certificate when present), does SAN pinning through a
// Verifier and answers:
//
//   - allow: status OK, OkHttpResponse setting x-watcher-runtime-id and
//     x-watcher-skr-domain with append_action OVERWRITE_IF_EXISTS_OR_ADD and
//     removing any other client-sent x-watcher-* header;
//   - deny: status PERMISSION_DENIED, DeniedHttpResponse 403 with header
//     x-watcher-deny-reason and a JSON body {"reason","message"};
//   - not ready (cache not synced) or a failed lookup: status UNAVAILABLE
//     and DeniedHttpResponse 503 with reason not-ready, so Envoy answers 503
//     and never allows.
//
// Every decision is counted in Prometheus and logged (denials at info,
// failed lookups as errors, allows and not-ready answers at V(1)).
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
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
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

// Metrics are the Prometheus metrics of Check.
type Metrics struct {
	decisions *prometheus.CounterVec
	allows    prometheus.Counter // decisions{result="allow",reason=""}, resolved once: the hot path
	latency   prometheus.Histogram
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "runtime_watcher",
			Subsystem: "ext_authz",
			Name:      "decisions_total",
			Help:      "Check decisions by result (allow, deny, unavailable) and deny reason.",
		}, []string{"result", "reason"}),
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
	m.allows = m.decisions.WithLabelValues(ResultAllow, "")
	return m, nil
}

// Server implements authv3.AuthorizationServer.
type Server struct {
	authv3.UnimplementedAuthorizationServer

	verifier Verifier
	ready    func() bool
	metrics  *Metrics
	log      logr.Logger
}

// New returns a Server. ready reports whether the runtime cache has synced;
// until it does, every Check answers 503. metrics may be nil.
func New(v Verifier, ready func() bool, metrics *Metrics, log logr.Logger) *Server {
	return &Server{verifier: v, ready: ready, metrics: metrics, log: log}
}

// Check decides one request.
func (s *Server) Check(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	start := time.Now()
	resp, result, reason := s.decide(ctx, req)
	if s.metrics != nil {
		if result == ResultAllow {
			s.metrics.allows.Inc()
		} else {
			s.metrics.decisions.WithLabelValues(result, reason).Inc()
		}
		s.metrics.latency.Observe(time.Since(start).Seconds())
	}
	return resp, nil
}

func (s *Server) decide(ctx context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, string, string) {
	httpReq := req.GetAttributes().GetRequest().GetHttp()
	if !s.ready() {
		if v := s.log.V(1); v.Enabled() {
			v.Info("Check unavailable: runtime cache not synced", "reason", contract.ReasonNotReady, "requestID", httpReq.GetId(), "path", httpReq.GetPath())
		}
		return unavailable("runtime cache not synced yet"), ResultUnavailable, string(contract.ReasonNotReady)
	}
	header, _ := headerValue(httpReq, contract.HeaderXFCC)
	id, err := s.verifier.Verify(ctx, header, req.GetAttributes().GetSource().GetCertificate())
	if err == nil {
		if v := s.log.V(1); v.Enabled() {
			v.Info("Check allowed", "runtime", id.RuntimeID, "skrDomain", id.SKRDomain, "requestID", httpReq.GetId(), "path", httpReq.GetPath())
		}
		return allowed(id, httpReq), ResultAllow, ""
	}
	if d := (*pinning.Denial)(nil); errors.As(err, &d) {
		s.log.Info("Check denied", "reason", d.Reason, "runtime", id.RuntimeID, "message", d.Message,
			"requestID", httpReq.GetId(), "path", httpReq.GetPath())
		return denied(d.Reason, d.Message), ResultDeny, string(d.Reason)
	}
	s.log.Error(err, "Check failed closed", "runtime", id.RuntimeID, "requestID", httpReq.GetId(), "path", httpReq.GetPath())
	return unavailable("runtime lookup failed"), ResultUnavailable, string(contract.ReasonNotReady)
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

// allowResponse is an allow answer in one allocation: the response and
// every message it points to (nine allocations when built field by field;
// this is the path every event takes).
type allowResponse struct {
	resp    authv3.CheckResponse
	status  rpcstatus.Status
	oneof   authv3.CheckResponse_OkResponse
	ok      authv3.OkHttpResponse
	options [2]corev3.HeaderValueOption
	headers [2]corev3.HeaderValue
	list    [2]*corev3.HeaderValueOption
}

func allowed(id pinning.Identity, r *authv3.AttributeContext_HttpRequest) *authv3.CheckResponse {
	a := new(allowResponse)
	a.status.Code = int32(codes.OK)
	a.headers[0].Key, a.headers[0].Value = contract.HeaderRuntimeID, id.RuntimeID
	a.headers[1].Key, a.headers[1].Value = contract.HeaderSKRDomain, id.SKRDomain
	for i := range a.options {
		a.options[i].Header = &a.headers[i]
		a.options[i].AppendAction = corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD
		a.list[i] = &a.options[i]
	}
	a.ok.Headers = a.list[:]
	a.ok.HeadersToRemove = clientIdentityHeaders(r)
	a.oneof.OkResponse = &a.ok
	a.resp.Status = &a.status
	a.resp.HttpResponse = &a.oneof
	return &a.resp
}

// clientIdentityHeaders lists (lowercase) every x-watcher-* header the
// client sent that the allow answer does not overwrite, for Envoy to remove.
func clientIdentityHeaders(r *authv3.AttributeContext_HttpRequest) []string {
	var remove []string
	add := func(k string) {
		if len(k) < len(identityHeaderPrefix) || !strings.EqualFold(k[:len(identityHeaderPrefix)], identityHeaderPrefix) {
			return
		}
		if lk := strings.ToLower(k); lk != contract.HeaderRuntimeID && lk != contract.HeaderSKRDomain {
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
