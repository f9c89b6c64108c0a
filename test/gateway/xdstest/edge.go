package xdstest

import (
	"fmt"
	"net"
	"strconv"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	rbacconfigv3 "github.com/envoyproxy/go-control-plane/envoy/config/rbac/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	extauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	rbacv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	routerv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The names istiod gives the resources of manifests/kcp/base/gateway.yaml
// (test/gateway/testdata holds what it generates in full).
const (
	AuthzCluster    = "outbound|9001||ext-authz.kcp-system.svc.cluster.local"
	UpstreamCluster = "outbound|8082||listener.kcp-system.svc.cluster.local"
	RouteName       = "https.443.https-watcher.kcp-gateway.istio-system"
	PolicyID        = "istio-ext-authz-ns[istio-system]-policy[runtime-watcher-ext-authz]-rule[0]"
	// Namespace is the gateway's namespace, where the SDS Secrets live.
	Namespace = "istio-system"
	// Credential is the Gateway's credentialName: SDS
	// kubernetes://<Credential> and kubernetes://<Credential>-cacert.
	Credential = "kcp-gateway-tls"
	// Manager is the manager whose event path the watcher route routes.
	Manager = "lifecycle-manager"
)

// Edge is one Gateway server with its route: the listener on Port for SNI
// Host, MUTUAL TLS from Credential, the CUSTOM policy for paths under
// Prefix enabling ext_authz at AuthzAddr, and the route of Manager's event
// path to the listener at UpstreamAddr with Retries retries.
type Edge struct {
	Port                    uint32
	Host                    string
	Prefix                  string
	AuthzAddr, UpstreamAddr string
	Retries                 uint32
}

// NewEdge is the edge manifests/kcp/base/gateway.yaml configures on a free
// loopback port: SNI localhost, policy for /v2/, two retries.
func NewEdge(authzAddr, upstreamAddr string) (Edge, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return Edge{}, err
	}
	port := uint32(l.Addr().(*net.TCPAddr).Port) //nolint:gosec // a TCP port fits
	if err := l.Close(); err != nil {
		return Edge{}, err
	}
	return Edge{Port: port, Host: "localhost", Prefix: "/v2/", AuthzAddr: authzAddr, UpstreamAddr: upstreamAddr, Retries: 2}, nil
}

// URL is the edge's https base URL.
func (e Edge) URL() string { return "https://" + e.Host + ":" + strconv.Itoa(int(e.Port)) }

// Serve sets s to hold the edge's clusters, endpoints, listener and route.
func (e Edge) Serve(s *Server) error {
	eds, err := Endpoints(AuthzCluster, e.AuthzAddr)
	if err != nil {
		return err
	}
	up, err := Endpoints(UpstreamCluster, e.UpstreamAddr)
	if err != nil {
		return err
	}
	s.Set(TypeURL(&clusterv3.Cluster{}), EDSCluster(AuthzCluster), EDSCluster(UpstreamCluster))
	s.Set(TypeURL(&endpointv3.ClusterLoadAssignment{}), eds, up)
	s.Set(TypeURL(&listenerv3.Listener{}), e.Listener())
	s.Set(TypeURL(&routev3.RouteConfiguration{}), e.Routes())
	return nil
}

// anyOf packs m; the messages here are built in code and always marshal.
func anyOf(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err)
	}
	return a
}

func sds(name string) *tlsv3.SdsSecretConfig {
	return &tlsv3.SdsSecretConfig{Name: name, SdsConfig: &corev3.ConfigSource{
		ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}}
}

// Listener is the gateway listener istiod generates: SNI chain for Host,
// MUTUAL TLS from SDS, SANITIZE_SET, the CUSTOM policy's shadow RBAC for
// Prefix, ext_authz (0.5 s, 503 on error), extra filters, the router.
func (e Edge) Listener(extra ...*hcmv3.HttpFilter) *listenerv3.Listener {
	tlsCtx := &tlsv3.DownstreamTlsContext{
		RequireClientCertificate: wrapperspb.Bool(true),
		CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsParams:                      &tlsv3.TlsParameters{TlsMinimumProtocolVersion: tlsv3.TlsParameters_TLSv1_2},
			AlpnProtocols:                  []string{"h2", "http/1.1"},
			TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{sds("kubernetes://" + Credential)},
			ValidationContextType: &tlsv3.CommonTlsContext_CombinedValidationContext{CombinedValidationContext: &tlsv3.CommonTlsContext_CombinedCertificateValidationContext{
				DefaultValidationContext:         &tlsv3.CertificateValidationContext{},
				ValidationContextSdsSecretConfig: sds("kubernetes://" + Credential + "-cacert"),
			}},
		},
	}
	rbac := &rbacv3.RBAC{ShadowRulesStatPrefix: "istio_ext_authz_", ShadowRules: &rbacconfigv3.RBAC{Policies: map[string]*rbacconfigv3.Policy{
		PolicyID: {
			Permissions: []*rbacconfigv3.Permission{{Rule: &rbacconfigv3.Permission_OrRules{OrRules: &rbacconfigv3.Permission_Set{Rules: []*rbacconfigv3.Permission{{
				Rule: &rbacconfigv3.Permission_UrlPath{UrlPath: &matcherv3.PathMatcher{Rule: &matcherv3.PathMatcher_Path{Path: &matcherv3.StringMatcher{
					MatchPattern: &matcherv3.StringMatcher_Prefix{Prefix: e.Prefix}}}}},
			}}}}}},
			Principals: []*rbacconfigv3.Principal{{Identifier: &rbacconfigv3.Principal_Any{Any: true}}},
		},
	}}}
	authz := &extauthzv3.ExtAuthz{
		TransportApiVersion: corev3.ApiVersion_V3,
		Services: &extauthzv3.ExtAuthz_GrpcService{GrpcService: &corev3.GrpcService{
			TargetSpecifier: &corev3.GrpcService_EnvoyGrpc_{EnvoyGrpc: &corev3.GrpcService_EnvoyGrpc{ClusterName: AuthzCluster}},
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
		{Name: "envoy.filters.http.rbac", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(rbac)}},
		{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(authz)}},
	}
	filters = append(filters, extra...)
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(&routerv3.Router{})}})
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix: "outbound_0.0.0.0_" + strconv.Itoa(int(e.Port)),
		RouteSpecifier: &hcmv3.HttpConnectionManager_Rds{Rds: &hcmv3.Rds{RouteConfigName: RouteName, ConfigSource: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}}},
		HttpFilters:                 filters,
		ForwardClientCertDetails:    hcmv3.HttpConnectionManager_SANITIZE_SET,
		SetCurrentClientCertDetails: &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Cert: true, Uri: true, Dns: true},
		NormalizePath:               wrapperspb.Bool(true),
		UseRemoteAddress:            wrapperspb.Bool(true),
	}
	return &listenerv3.Listener{
		Name: "0.0.0.0_" + strconv.Itoa(int(e.Port)),
		Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: "0.0.0.0", PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: e.Port}}}},
		ListenerFilters: []*listenerv3.ListenerFilter{{Name: "envoy.filters.listener.tls_inspector",
			ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: anyOf(&tlsinspectorv3.TlsInspector{})}}},
		FilterChains: []*listenerv3.FilterChain{{
			FilterChainMatch: &listenerv3.FilterChainMatch{ServerNames: []string{e.Host}},
			TransportSocket: &corev3.TransportSocket{Name: "envoy.transport_sockets.tls",
				ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: anyOf(tlsCtx)}},
			Filters: []*listenerv3.Filter{{Name: "envoy.filters.network.http_connection_manager",
				ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: anyOf(hcm)}}},
		}},
	}
}

// Routes is the route configuration of the VirtualService vs-controller
// writes: Manager's event path to UpstreamCluster with Retries retries on
// connection failures and 503, then extra routes.
func (e Edge) Routes(extra ...*routev3.Route) *routev3.RouteConfiguration {
	r := &routev3.Route{
		Name:  "watcher",
		Match: &routev3.RouteMatch{PathSpecifier: &routev3.RouteMatch_Prefix{Prefix: contract.EventPath(Manager)}},
		Action: &routev3.Route_Route{Route: &routev3.RouteAction{
			ClusterSpecifier: &routev3.RouteAction_Cluster{Cluster: UpstreamCluster},
			Timeout:          durationpb.New(0),
			RetryPolicy: &routev3.RetryPolicy{
				RetryOn: "connect-failure,refused-stream,unavailable,cancelled,retriable-status-codes", NumRetries: wrapperspb.UInt32(e.Retries),
				RetriableStatusCodes: []uint32{503},
			},
		}},
	}
	return &routev3.RouteConfiguration{Name: RouteName, VirtualHosts: []*routev3.VirtualHost{{
		Name: e.Host + ":443", Domains: []string{e.Host, e.Host + ":*"}, Routes: append([]*routev3.Route{r}, extra...),
		IncludeRequestAttemptCount: true,
	}}}
}

// EDSCluster is an outbound cluster of type EDS over ADS, as istiod
// generates for a Service.
func EDSCluster(name string) *clusterv3.Cluster {
	return &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_EDS},
		EdsClusterConfig: &clusterv3.Cluster_EdsClusterConfig{ServiceName: name, EdsConfig: &corev3.ConfigSource{
			ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}, ResourceApiVersion: corev3.ApiVersion_V3}},
		ConnectTimeout: durationpb.New(time.Second)}
}

// Endpoints is the load assignment of cluster name: addrs (host:port).
func Endpoints(name string, addrs ...string) (*endpointv3.ClusterLoadAssignment, error) {
	cla := &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{}}}
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return nil, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, fmt.Errorf("endpoint %s: %w", a, err)
		}
		cla.Endpoints[0].LbEndpoints = append(cla.Endpoints[0].LbEndpoints, &endpointv3.LbEndpoint{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
			Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)}}}}}}})
	}
	return cla, nil
}

// Secrets reads the Secrets the listener's SDS names refer to: the
// gateway's certificate server and the CA ca that verifies clients.
func Secrets(server *pki.Leaf, ca *pki.CA) client.Reader {
	return fake.NewClientBuilder().WithScheme(testenv.Scheme()).WithObjects(
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Credential},
			Data: map[string][]byte{corev1.TLSCertKey: server.CertPEM, corev1.TLSPrivateKeyKey: server.KeyPEM}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: Credential + "-cacert"},
			Data: map[string][]byte{"ca.crt": ca.PEM}},
	).Build()
}

// Node is the ingress gateway pod the Gateway selects.
func Node() gateway.Node {
	return gateway.Node{Name: "gw", Namespace: Namespace, Labels: map[string]string{"istio": "ingressgateway"},
		IP: "127.0.0.1", ClusterID: "Kubernetes", DomainSuffix: "cluster.local"}
}
