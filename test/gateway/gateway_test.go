package gateway_test

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	faultv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/fault/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/code"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The resources below have the shape istiod generates for the Gateway and
// the AuthorizationPolicy of manifests/kcp/base/gateway.yaml (see
// testdata/ for what it generates in full; TestIstiodConfigIsAccepted).
const (
	authzCluster = "outbound|9001||ext-authz.kcp-system.svc.cluster.local"
	opCluster    = "outbound|8082||listener.kcp-system.svc.cluster.local"
	routeName    = "https.443.https-watcher.kcp-gateway.istio-system"
	policyID     = "istio-ext-authz-ns[istio-system]-policy[runtime-watcher-ext-authz]-rule[0]"
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
	ads      *adsServer
	gw       *gateway.Gateway
	reg      *prometheus.Registry
	url      string
	port     uint32
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

func anyOf(t *testing.T, m proto.Message) *anypb.Any {
	t.Helper()
	a, err := anypb.New(m)
	must(t, err)
	return a
}

func sds(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}}
}

// istioListener is the gateway listener istiod generates: SNI chain for
// host, MUTUAL TLS from SDS, SANITIZE_SET, the CUSTOM policy's shadow RBAC
// for prefix, ext_authz (0.5 s, 503 on error) and the router.
func (f *fixture) istioListener(t *testing.T, host, prefix string, extra ...*hcmv3.HttpFilter) *listenerv3.Listener {
	tlsCtx := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			AlpnProtocols:                  []string{"h2", "http/1.1"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds("kubernetes://kcp-gateway-tls")},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
				ValidationContextSdsSecretConfig: sds("kubernetes://kcp-gateway-tls-cacert"),
			}},
		},
	}
	rbac := &rbacv3.RBAC{ShadowRulesStatPrefix: "istio_ext_authz_", ShadowRules: &rbacconfigv3.RBAC{Policies: map[string]*rbacconfigv3.Policy{
		policyID: {
			Permissions: []*rbacconfigv3.Permission{{Rule: &rbacconfigv3.Permission_OrRules{OrRules: &rbacconfigv3.Permission_Set{Rules: []*rbacconfigv3.Permission{{
				Rule: &rbacconfigv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: prefix}}}}},
			}}}}}},
			Principals: []*rbacconfigv3.Principal{{Identifier: &rbacconfigv3.Principal_Any{Any: true}}},
		},
	}}}
	authz := &extauthzv3.ExtAuthz{
		TransportApiVersion: corev3.ApiVersion_V3,
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: authzCluster}},
			Timeout:         durationpb.New(500 * time.Millisecond),
		}},
		StatusOnError: &typev3.HttpStatus{Code: typev3.StatusCode_ServiceUnavailable},
		FilterEnabledMetadata: &matcherv3.MetadataMatcher{
			Filter: "envoy.filters.http.rbac",
			Path:   []*matcherv3.MetadataMatcher_PathSegment{{Segment: &matcherv3.MetadataMatcher_PathSegment_Key{Key: "istio_ext_authz_shadow_effective_policy_id"}}},
			Value: &matcherv3.ValueMatcher{MatchPattern: &matcherv3.ValueMatcher_StringMatch{StringMatch: &matcherv3.StringMatcher{
				MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: "istio-ext-authz"}}}},
		},
		IncludePeerCertificate: true,
	}
	filters := []*hcmv3.HttpFilter{
		{Name: "envoy.filters.http.rbac", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, rbac)}},
		{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, authz)}},
	}
	filters = append(filters, extra...)
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(t, &routerv3.Router{})}})
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "outbound_0.0.0.0_" + strconv.Itoa(int(f.port)),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: routeName, ConfigSource: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}}},
		HttpFilters:                 filters,
		ForwardClientCertDetails:    hcmv3.HttpConnectionManager_SANITIZE_SET,
		SetCurrentClientCertDetails: &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Cert: true, Uri: true, Dns: true},
		NormalizePath:               wrapperspb.Bool(true),
		UseRemoteAddress:            wrapperspb.Bool(true),
	}
	return &listenerv3.Listener{
		Name: "0.0.0.0_" + strconv.Itoa(int(f.port)),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: f.port}}}},
		ListenerFilters: []*listenerv3.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector",
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: anyOf(t, &tlsinspectorv3.TlsInspector{})}}},
		FilterChains: []*listenerv3.FilterChain{{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{host}},
			TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(t, tlsCtx)}},
			Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: anyOf(t, hcm)}}},
		}},
	}
}

func routes(retries uint32, extra ...*routev3.Route) *routev3.RouteConfiguration {
	r := &routev3.Route{
		Name:  "watcher",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: "/v2/lifecycle-manager/event"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: opCluster},
			Timeout:          durationpb.New(0),
			RetryPolicy: &routev3.RetryPolicy{
				RetryOn: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes", NumRetries: wrapperspb.UInt32(retries),
				RetriableStatusCodes: []uint32{503},
			},
		}},
	}
	return &routev3.RouteConfiguration{Name: routeName, VirtualHosts: []*routev3.VirtualHost{{
		Name: "localhost:443", Domains: []string{"localhost", "localhost:*"}, Routes: append([]*routev3.Route{r}, extra...),
		IncludeRequestAttemptCount: true,
	}}}
}

func edsCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}},
		ConnectTimeout: durationpb.New(time.Second)}
}

func endpoints(name string, addrs ...string) *endpointv3.ClusterLoadAssignment {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{}}}
	for _, a := range addrs {
		host, port, _ := net.SplitHostPort(a)
		p, _ := strconv.Atoi(port)
		cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}}}})
	}
	return cla
}

func freePort(t *testing.T) uint32 {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	defer func() { _ = l.Close() }()
	return uint32(l.Addr().(*net.TCPAddr).Port)
}

// start runs an ADS server holding the Istio-shaped configuration, ext-authz
// (or a closed port when authzUp is false), an upstream and the stand-in.
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

	f := &fixture{authz: &scriptedAuthz{}, upstream: make(chan upstreamHit, 10), leaf: clientLeaf, port: freePort(t)}
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

	secrets := fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "kcp-gateway-tls"},
			Data: map[string][]byte{corev1.TLSCertKey: serverLeaf.CertPEM, corev1.TLSPrivateKeyKey: serverLeaf.KeyPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "istio-system", Name: "kcp-gateway-tls-cacert"},
			Data: map[string][]byte{"ca.crt": ca.PEM}},
	).Build()

	f.ads = startADS(t)
	f.ads.Set(typeOf(&clusterv3.Cluster{}), edsCluster(authzCluster), edsCluster(opCluster))
	f.ads.Set(typeOf(&endpointv3.ClusterLoadAssignment{}), endpoints(authzCluster, f.authzUp), endpoints(opCluster, f.upAddr))
	f.ads.Set(typeOf(&listenerv3.Listener{}), f.istioListener(t, "localhost", "/v2/"))
	f.ads.Set(typeOf(&routev3.RouteConfiguration{}), routes(2))

	f.reg = prometheus.NewRegistry()
	f.gw, err = gateway.New(gateway.Config{XDSAddr: f.ads.addr, Secrets: secrets, Registerer: f.reg, Log: testr.New(t),
		Node: gateway.Node{Name: "gw", Namespace: "istio-system", Labels: map[string]string{"istio": "ingressgateway"}, IP: "127.0.0.1", ClusterID: "Kubernetes", DomainSuffix: "cluster.local"}})
	must(t, err)
	go func() { _ = f.gw.Run(ctx) }()
	f.waitRoute(t, "/v2/lifecycle-manager/event", opCluster)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	must(t, f.gw.WaitServing(wctx))
	_, err = f.gw.Serve(ctx)
	must(t, err)

	clientTLS, err := clientLeaf.TLS()
	must(t, err)
	f.url = "https://localhost:" + strconv.Itoa(int(f.port))
	f.client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: ca.Pool(), Certificates: []tls.Certificate{clientTLS}, MinVersion: tls.VersionTLS12,
	}}}
	return f
}

// waitRoute waits (by the accepted configuration, not by time) until path
// on localhost routes to cluster.
func (f *fixture) waitRoute(t *testing.T, path, cluster string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		changed := f.gw.Changed()
		if f.gw.Route("localhost", path) == cluster {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("path %s not routed to %s (versions %v, NACKs %v)", path, cluster, f.gw.Versions(), f.ads.Nacks())
		}
	}
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
	f.ads.Set(typeOf(&listenerv3.Listener{}), f.istioListener(t, "localhost", "/v2/",
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
	f.ads.Set(typeOf(&routev3.RouteConfiguration{}), routes(2, &routev3.Route{
		Match:  &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Path{Path: "/v2/other/event"}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: opCluster}}},
	}))
	f.waitRoute(t, "/v2/other/event", opCluster)
	if resp := f.post(t, "/v2/other/event"); resp.StatusCode != http.StatusAccepted {
		t.Fatalf("status %d, want 202", resp.StatusCode)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
