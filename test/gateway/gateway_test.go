package gateway_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr/testr"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
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
	switch {
	case strings.Contains(path, "denied"):
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(code.Code_PERMISSION_DENIED)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status:  &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
				Headers: []*corev3.HeaderValueOption{{Header: &corev3.HeaderValue{Key: contract.HeaderDenyReason, Value: "san-mismatch"}}},
				Body:    `{"reason":"san-mismatch","message":"no"}`,
			}},
		}, nil
	case strings.Contains(path, "unavailable"):
		return &authv3.CheckResponse{
			Status: &rpcstatus.Status{Code: int32(code.Code_UNAVAILABLE)},
			HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
				Status: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
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
	url      string
	client   *http.Client
	authz    *scriptedAuthz
	upstream chan upstreamHit
	leaf     *pki.Leaf
	ca       *pki.CA
}

func start(t *testing.T, authzUp bool) *fixture {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)

	ca, err := pki.NewCA("gateway-test-ca")
	must(t, err)
	serverLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "gateway", DNSNames: []string{"localhost"}})
	must(t, err)
	clientLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr-1.example.com"}, URIs: []string{"spiffe://skr/runtime-1"}})
	must(t, err)

	authz := &scriptedAuthz{}
	gl, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	authzAddr := gl.Addr().String()
	if authzUp {
		gs := grpc.NewServer()
		authv3.RegisterAuthorizationServer(gs, authz)
		go func() { _ = gs.Serve(gl) }()
		t.Cleanup(gs.Stop)
	} else {
		must(t, gl.Close()) // nothing listens: calls fail
	}

	hits := make(chan upstreamHit, 10)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- upstreamHit{path: r.URL.Path, header: r.Header.Clone()}
		w.WriteHeader(http.StatusAccepted)
	}), ReadHeaderTimeout: time.Second}
	ul, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = up.Serve(ul) }()
	t.Cleanup(func() { _ = up.Close() })

	vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "watcher", Namespace: "kcp-system"}}
	vs.Spec.Gateways = []string{"istio-system/kcp-gateway"}
	vs.Spec.Hosts = []string{"localhost"}
	vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
		Match: []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{
			MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: "/v2/lifecycle-manager/event"}}}},
		Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
			Host: "listener.kcp-system.svc.cluster.local", Port: &istioapinetworking.PortSelector{Number: 8082}}}},
	}}
	reader := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(vs).Build()

	serverTLS, err := serverLeaf.TLS()
	must(t, err)
	g, err := gateway.New(gateway.Config{
		ServerCert: serverTLS, ClientCAs: ca.Pool(), AuthzAddr: authzAddr, AuthzTimeout: 2 * time.Second,
		Gateway: "istio-system/kcp-gateway", VirtualServices: reader,
		Upstreams: map[string]string{"listener.kcp-system.svc.cluster.local:8082": ul.Addr().String()},
		Log:       testr.New(t),
	})
	must(t, err)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = g.Serve(ctx, l) }()
	t.Cleanup(func() { _ = g.Close() })

	clientTLS, err := clientLeaf.TLS()
	must(t, err)
	_, port, _ := net.SplitHostPort(l.Addr().String())
	return &fixture{
		url:      "https://localhost:" + port,
		authz:    authz,
		upstream: hits,
		leaf:     clientLeaf,
		ca:       ca,
		client: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
			RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientTLS}, MinVersion: tls.VersionTLS12,
		}}},
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
		t.Fatalf("status %d, want 202 from the upstream", resp.StatusCode)
	}
	hit := <-f.upstream
	if hit.path != "/v2/lifecycle-manager/event" {
		t.Errorf("upstream path %q", hit.path)
	}
	if got := hit.header.Values(contract.HeaderRuntimeID); len(got) != 1 || got[0] != "runtime-1" {
		t.Errorf("upstream %s = %q, want only ext-authz's value", contract.HeaderRuntimeID, got)
	}

	// The XFCC header ext-authz saw: one element, the verified certificate.
	req := f.authz.last()
	h := req.GetAttributes().GetRequest().GetHttp()
	elems, err := xfcc.Parse(h.GetHeaders()[contract.HeaderXFCC])
	must(t, err)
	if len(elems) != 1 {
		t.Fatalf("XFCC has %d elements, want 1 (SANITIZE_SET)", len(elems))
	}
	cert, err := elems[0].Certificate()
	must(t, err)
	if !cert.Equal(f.leaf.Cert) {
		t.Error("XFCC Cert is not the client certificate")
	}
	if got := elems[0].Values("DNS"); len(got) != 1 || got[0] != "skr-1.example.com" {
		t.Errorf("XFCC DNS = %q", got)
	}
	if got, _ := elems[0].Value("URI"); got != "spiffe://skr/runtime-1" {
		t.Errorf("XFCC URI = %q", got)
	}
	if got, _ := elems[0].Value("Subject"); got != "CN=runtime-1" {
		t.Errorf("XFCC Subject = %q", got)
	}

	// The rest of the CheckRequest as Envoy fills it.
	for k := range h.GetHeaders() {
		if k != strings.ToLower(k) {
			t.Errorf("header name %q is not lowercase", k)
		}
	}
	if h.GetHeaders()[":path"] != "/v2/lifecycle-manager/event" || h.GetMethod() != http.MethodPost || h.GetPath() != "/v2/lifecycle-manager/event" {
		t.Errorf("request attributes: method %q path %q :path %q", h.GetMethod(), h.GetPath(), h.GetHeaders()[":path"])
	}
	src := req.GetAttributes().GetSource()
	if src.GetPrincipal() != "spiffe://skr/runtime-1" {
		t.Errorf("source principal %q, want the first URI SAN", src.GetPrincipal())
	}
	srcCert, err := xfcc.DecodeCert(src.GetCertificate())
	must(t, err)
	if !srcCert.Equal(f.leaf.Cert) {
		t.Error("source.certificate is not the client certificate")
	}
	if src.GetAddress().GetSocketAddress().GetAddress() != "127.0.0.1" {
		t.Errorf("source address %v", src.GetAddress())
	}
}

func TestDeniedAndUnavailableResponsesReachTheClient(t *testing.T) {
	f := start(t, true)
	resp := f.post(t, "/v2/lifecycle-manager/event/denied")
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || resp.Header.Get(contract.HeaderDenyReason) != "san-mismatch" ||
		string(body) != `{"reason":"san-mismatch","message":"no"}` {
		t.Errorf("denied: %d %q %s", resp.StatusCode, resp.Header.Get(contract.HeaderDenyReason), body)
	}
	resp = f.post(t, "/v2/lifecycle-manager/event/unavailable")
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("unavailable: status %d, want 503", resp.StatusCode)
	}
	select {
	case hit := <-f.upstream:
		t.Errorf("upstream reached for %s", hit.path)
	default:
	}
}

func TestUnroutedPathIs404(t *testing.T) {
	f := start(t, true)
	if resp := f.post(t, "/v2/other-manager/event"); resp.StatusCode != http.StatusNotFound {
		t.Errorf("status %d, want 404", resp.StatusCode)
	}
}

func TestExtAuthzDownFailsClosed(t *testing.T) {
	f := start(t, false)
	if resp := f.post(t, "/v2/lifecycle-manager/event"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("status %d, want 403 (fail closed)", resp.StatusCode)
	}
}

func TestClientWithoutCertificateIsRejected(t *testing.T) {
	f := start(t, true)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: f.ca.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := c.Post(f.url+"/v2/lifecycle-manager/event", "application/json", strings.NewReader(`{}`))
	if err == nil {
		_ = resp.Body.Close()
		t.Fatalf("request without a client certificate got %d, want a TLS failure", resp.StatusCode)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
