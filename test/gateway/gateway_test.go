package gateway_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway/xdstest"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// scriptedAuthz answers Check by path, like a policy would, and records
// every request it saw.
type scriptedAuthz struct {
	authv3.UnimplementedAuthorizationServer
	mu   sync.Mutex
	seen []*authv3.CheckRequest
}

func (s *scriptedAuthz) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	s.mu.Lock()
	s.seen = append(s.seen, req)
	s.mu.Unlock()
	path := req.GetAttributes().GetRequest().GetHttp().GetPath()
	if strings.Contains(path, "denied") {
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(code.Code_PERMISSION_DENIED)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
				Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: contract.HeaderDenyReason, Value: "san-mismatch"}}},
				Body:    `{"reason":"san-mismatch","message":"no"}`,
			}},
		}, nil
	}
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(code.Code_OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{
			Headers: []*corev3.HeaderValueOption{{
				Header:       &corev3.HeaderValue{Key: contract.HeaderRuntimeID, Value: "runtime-1"},
				AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD,
			}},
		}},
	}, nil
}

func (s *scriptedAuthz) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.seen)
}

func (s *scriptedAuthz) last() *authv3.CheckRequest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.seen[len(s.seen)-1]
}

type upstreamHit struct {
	path   string
	header http.Header
}

type fixture struct {
	ads      *xdstest.Server
	edge     xdstest.Edge
	gw       *gateway.Gateway
	reg      *prometheus.Registry
	url      string
	authz    *scriptedAuthz
	authzUp  string
	upstream chan upstreamHit
	upAddr   string
	leaf     *pki.Leaf
	client   *http.Client
	// status is what the upstream answers (0: 202).
	statusMu sync.Mutex
	status   []int
}

// start runs an ADS server holding the Istio-shaped configuration, ext-authz
// (or a closed port when authzUp is false), an upstream and the stand-in.
func start(t *testing.T, authzUp bool) *fixture {
	t.Helper()
	ca, err := pki.NewCA("gateway-test-ca")
	must(t, err)
	serverLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "gateway", DNSNames: []string{"localhost"}})
	must(t, err)
	clientLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr-1.example.com"}, URIs: []string{"spiffe://skr/runtime-1"}})
	must(t, err)

	f := &fixture{authz: &scriptedAuthz{}, upstream: make(chan upstreamHit, 10), leaf: clientLeaf}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	f.authzUp = gl.Addr().String()
	if authzUp {
		gs := grpc.NewServer()
		authv3.RegisterAuthorizationServer(gs, f.authz)
		go func() { _ = gs.Serve(gl) }()
		t.Cleanup(gs.Stop)
	} else {
		must(t, gl.Close()) // nothing listens: calls fail
	}

	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.upstream <- upstreamHit{path: r.URL.Path, header: r.Header.Clone()}
		f.statusMu.Lock()
		status := http.StatusAccepted
		if len(f.status) > 0 {
			status, f.status = f.status[0], f.status[1:]
		}
		f.statusMu.Unlock()
		w.WriteHeader(status)
	}), ReadHeaderTimeout: time.Second}
	ul, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = up.Serve(ul) }()
	t.Cleanup(func() { _ = up.Close() })
	f.upAddr = ul.Addr().String()

	f.edge, err = xdstest.NewEdge(f.authzUp, f.upAddr)
	must(t, err)
	f.ads = xdstest.Start(t)
	must(t, f.edge.Serve(f.ads))
	f.reg = prometheus.NewRegistry()
	f.gw = xdstest.RunGateway(t, f.ads, f.edge, xdstest.Secrets(serverLeaf, ca), f.reg)

	clientTLS, err := clientLeaf.TLS()
	must(t, err)
	f.url = f.edge.URL()
	f.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientTLS}, MinVersion: tls.VersionTLS12,
	}}}
	return f
}

// waitAnswer waits until the stand-in ACKed or NACKed the last push.
func (f *fixture) waitNack(t *testing.T, n int) []string {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		changed := f.ads.Changed()
		if nacks := f.ads.Nacks(); len(nacks) >= n {
			return nacks
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("no NACK #%d (versions %v)", n, f.gw.Versions())
		}
	}
}

func (f *fixture) post(t *testing.T, path string) *http.Response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, f.url+path, strings.NewReader(`{}`))
	must(t, err)
	// What a client could forge; the gateway must not let either through.
	req.Header.Set(contract.HeaderXFCC, "Hash=forged;DNS=victim.example.com")
	req.Header.Set(contract.HeaderRuntimeID, "victim")
	resp, err := f.client.Do(req)
	must(t, err)
	t.Cleanup(func() { _ = resp.Body.Close() })
	return resp
}

func TestAllowedRequestIsSanitizedCheckedAndRouted(t *testing.T) {
	f := start(t, true)
	resp := f.post(t, "/v2/lifecycle-manager/event")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}
	hit := <-f.upstream
	if got := hit.header.Get(contract.HeaderRuntimeID); got != "runtime-1" {
		t.Errorf("upstream runtime ID %q: the OK response's header must replace the client's", got)
	}
	want := gateway.XFCC(f.leaf.Cert)
	if got := hit.header.Values(contract.HeaderXFCC); len(got) != 1 || got[0] != want {
		t.Errorf("upstream XFCC %q, want exactly the gateway's %q (SANITIZE_SET)", got, want)
	}
	if got := hit.header.Get("X-Envoy-Attempt-Count"); got != "1" {
		t.Errorf("x-envoy-attempt-count %q, want 1 (include_request_attempt_count)", got)
	}
	req := f.authz.last()
	if got := req.GetAttributes().GetSource().GetCertificate(); got != xfcc.EncodeCert(f.leaf.CertPEM) {
		t.Errorf("CheckRequest certificate %q (include_peer_certificate)", got)
	}
	if got := req.GetAttributes().GetRequest().GetHttp().GetHeaders()[contract.HeaderXFCC]; got != want {
		t.Errorf("ext-authz saw XFCC %q, want the sanitized %q", got, want)
	}
	handshakes, err := promtext.Gathered(f.reg, "gateway_downstream_tls_handshakes_total", "version", "cipher")
	must(t, err)
	for k, n := range handshakes {
		if !strings.HasPrefix(k, "TLS 1.3/TLS_") || n != 1 || len(handshakes) != 1 {
			t.Errorf("gateway_downstream_tls_handshakes_total %v, want the one TLS 1.3 handshake with its suite", handshakes)
		}
	}
	if len(handshakes) == 0 {
		t.Error("gateway_downstream_tls_handshakes_total counted no handshake")
	}
}

func TestDeniedAnswerReachesTheClient(t *testing.T) {
	f := start(t, true)
	resp := f.post(t, "/v2/denied/event")
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(contract.HeaderDenyReason) != "san-mismatch" {
		t.Fatalf("status %d reason %q, want 403 san-mismatch", resp.StatusCode, resp.Header.Get(contract.HeaderDenyReason))
	}
}

func TestExtAuthzOnlyWhereTheShadowRuleMatches(t *testing.T) {
	f := start(t, true)
	// Outside /v2/ the CUSTOM policy's shadow rule does not match: ext_authz
	// is not asked (Istio's behaviour for paths: ["/v2/*"]), the route
	// table has no route: 404.
	resp := f.post(t, "/other")
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("status %d, want 404", resp.StatusCode)
	}
	if n := f.authz.count(); n != 0 {
		t.Fatalf("ext-authz asked %d times for a path outside the policy", n)
	}
}

func TestExtAuthzDownAnswersStatusOnError(t *testing.T) {
	f := start(t, false)
	resp := f.post(t, "/v2/lifecycle-manager/event")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503 (status_on_error)", resp.StatusCode)
	}
	select {
	case hit := <-f.upstream:
		t.Fatalf("request reached the upstream without ext-authz: %v", hit.path)
	default:
	}
	got, err := promtext.Gathered(f.reg, "gateway_ext_authz_total", "result")
	must(t, err)
	if got["error"] != 1 {
		t.Errorf("gateway_ext_authz_total %v, want error 1", got)
	}
}

func TestRetriesRetriableStatusCodes(t *testing.T) {
	f := start(t, true)
	f.status = []int{503, 503}
	resp := f.post(t, "/v2/lifecycle-manager/event")
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202 after two retries", resp.StatusCode)
	}
	var attempts []string
	for range 3 {
		attempts = append(attempts, (<-f.upstream).header.Get("X-Envoy-Attempt-Count"))
	}
	if strings.Join(attempts, ",") != "1,2,3" {
		t.Errorf("attempt counts %v, want 1,2,3", attempts)
	}
}

func TestClientWithoutCertificateFailsTheHandshake(t *testing.T) {
	f := start(t, true)
	tr := f.client.Transport.(*http.Transport).Clone()
	tr.TLSClientConfig.Certificates = nil
	_, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Post(f.url+"/v2/lifecycle-manager/event", "application/json", strings.NewReader("{}"))
	if err == nil {
		t.Fatal("a client without a certificate got an answer")
	}
}

func TestUnimplementedFeatureIsNacked(t *testing.T) {
	f := start(t, true)
	before := f.gw.Versions()["LDS"]
	// A filter the stand-in does not implement: fault injection that
	// aborts requests (an empty fault filter, as Istio adds, is inert).
	f.ads.Set(xdstest.TypeURL(&listenerv3.Listener{}), f.edge.Listener(
		&hcmv3.HttpFilter{Name: "envoy.filters.http.fault", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &faultv3.HTTPFault{
			Abort: &faultv3.FaultAbort{ErrorType: &faultv3.FaultAbort_HttpStatus{HttpStatus: 500}}})}}))
	nacks := f.waitNack(t, 1)
	if !strings.Contains(nacks[0], "envoy.extensions.filters.http.fault.v3.HTTPFault") {
		t.Errorf("NACK detail %q does not name the filter", nacks[0])
	}
	if got := f.gw.Versions()["LDS"]; got != before {
		t.Errorf("LDS version %s after a NACK, want the previous %s", got, before)
	}
	got, err := promtext.Gathered(f.reg, "gateway_xds_updates_total", "type", "result")
	must(t, err)
	if got["LDS/nack"] != 1 {
		t.Errorf("gateway_xds_updates_total %v, want LDS/nack 1", got)
	}
	// The previous configuration keeps serving.
	if resp := f.post(t, "/v2/lifecycle-manager/event"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d after a NACK, want 202 from the previous configuration", resp.StatusCode)
	}
}

func TestNewRouteIsLiveAfterThePush(t *testing.T) {
	f := start(t, true)
	f.ads.Set(xdstest.TypeURL(&routev3.RouteConfiguration{}), f.edge.Routes(&routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v2/other/event"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: xdstest.UpstreamCluster}}},
	}))
	xdstest.WaitRoute(t, f.gw, f.ads, f.edge.Host, "/v2/other/event", xdstest.UpstreamCluster)
	if resp := f.post(t, "/v2/other/event"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}
}

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	must(t, err)
	return a
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
