package envoy

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
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
	http2v3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// The names istiod gives the resources of manifests/kcp/base/gateway.yaml.
const (
	AuthzCluster    = "outbound|9001||ext-authz.kcp-system.svc.cluster.local"
	UpstreamCluster = "outbound|8082||listener.kcp-system.svc.cluster.local"
	RouteName       = "https.443.https-watcher.kcp-gateway.istio-system"
	PolicyID        = "istio-ext-authz-ns[istio-system]-policy[runtime-watcher-ext-authz]-rule[0]"
	// Credential is the Gateway's credentialName: istiod names its SDS
	// secrets kubernetes://<Credential> and kubernetes://<Credential>-cacert.
	Credential = "kcp-gateway-tls"
	// Manager is the manager whose event path the edge routes.
	Manager = "lifecycle-manager"
	// ListenerName is the edge's listener.
	ListenerName = "edge"
)

// Edge is one Gateway server with its route, as istiod configures it for
// manifests/kcp/base/gateway.yaml: a listener for SNI Host with MUTUAL TLS
// (the certificate and client CA as the SDS secrets istiod names), XFCC
// SANITIZE_SET, the CUSTOM policy's shadow RBAC for paths under Prefix
// enabling ext_authz at AuthzAddr (0.5 s, 503 on error), and Manager's event
// path routed to UpstreamAddr with Retries retries.
type Edge struct {
	Host                    string
	Prefix                  string
	AuthzAddr, UpstreamAddr string
	Retries                 uint32
	// Server is the gateway's certificate, CA the client CA.
	Server *pki.Leaf
	CA     *pki.CA
	// NoAuthz leaves the CUSTOM policy's RBAC and ext_authz filters out
	// (the edge without authorization: a cost ceiling).
	NoAuthz bool
}

// NewEdge is the edge of manifests/kcp/base/gateway.yaml: SNI localhost,
// policy for /v2/, two retries.
func NewEdge(authzAddr, upstreamAddr string, server *pki.Leaf, ca *pki.CA) Edge {
	return Edge{Host: "localhost", Prefix: "/v2/", AuthzAddr: authzAddr, UpstreamAddr: upstreamAddr, Retries: 2, Server: server, CA: ca}
}

func anyOf(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		panic(err) // built in code: always marshals
	}
	return a
}

// Bootstrap is the static bootstrap of the edge: the admin API on
// 127.0.0.1 (port 0: Start reads the bound address), the listener on
// 127.0.0.1 port 0 (Port reads it), the two clusters, and the two secrets.
func (e Edge) Bootstrap() ([]byte, error) {
	up, err := staticCluster(UpstreamCluster, e.UpstreamAddr, false)
	if err != nil {
		return nil, err
	}
	clusters := []*clusterv3.Cluster{up}
	if !e.NoAuthz {
		authz, err := staticCluster(AuthzCluster, e.AuthzAddr, true)
		if err != nil {
			return nil, err
		}
		clusters = append(clusters, authz)
	}
	b := &bootstrapv3.Bootstrap{
		Admin: &bootstrapv3.Admin{Address: socket("127.0.0.1", 0)},
		StaticResources: &bootstrapv3.Bootstrap_StaticResources{
			Listeners: []*listenerv3.Listener{e.Listener()},
			Clusters:  clusters,
			Secrets: []*tlsv3.Secret{
				{Name: "kubernetes://" + Credential, Type: &tlsv3.Secret_TlsCertificate{TlsCertificate: &tlsv3.TlsCertificate{
					CertificateChain: inline(e.Server.CertPEM), PrivateKey: inline(e.Server.KeyPEM)}}},
				{Name: "kubernetes://" + Credential + "-cacert", Type: &tlsv3.Secret_ValidationContext{ValidationContext: &tlsv3.CertificateValidationContext{
					TrustedCa: inline(e.CA.PEM)}}},
			},
		},
	}
	return protojson.MarshalOptions{UseProtoNames: true}.Marshal(b)
}

func inline(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func socket(host string, port uint32) *corev3.Address {
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port}}}}
}

func staticCluster(name, addr string, grpc bool) (*clusterv3.Cluster, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", addr, err)
	}
	c := &clusterv3.Cluster{Name: name, ClusterDiscoveryType: &clusterv3.Cluster_Type{Type: clusterv3.Cluster_STATIC},
		ConnectTimeout: durationpb.New(time.Second),
		LoadAssignment: &endpointv3.ClusterLoadAssignment{ClusterName: name, Endpoints: []*endpointv3.LocalityLbEndpoints{{
			LbEndpoints: []*endpointv3.LbEndpoint{{HostIdentifier: &endpointv3.LbEndpoint_Endpoint{Endpoint: &endpointv3.Endpoint{
				Address: socket(host, uint32(p))}}}}}}}}
	if grpc { // istiod: a GRPC port gets HTTP/2 upstream
		c.TypedExtensionProtocolOptions = map[string]*anypb.Any{"envoy.extensions.upstreams.http.v3.HttpProtocolOptions": anyOf(&http2v3.HttpProtocolOptions{
			UpstreamProtocolOptions: &http2v3.HttpProtocolOptions_ExplicitHttpConfig_{ExplicitHttpConfig: &http2v3.HttpProtocolOptions_ExplicitHttpConfig{
				ProtocolConfig: &http2v3.HttpProtocolOptions_ExplicitHttpConfig_Http2ProtocolOptions{Http2ProtocolOptions: &corev3.Http2ProtocolOptions{}}}}})}
	}
	return c, nil
}

// Listener is the gateway listener: SNI chain for Host, MUTUAL TLS from
// the SDS secrets, SANITIZE_SET, the CUSTOM policy's shadow RBAC for
// Prefix, ext_authz, the router.
func (e Edge) Listener() *listenerv3.Listener {
	sds := func(name string) *tlsv3.SdsSecretConfig { return &tlsv3.SdsSecretConfig{Name: name} }
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
	}
	var filters []*hcmv3.HttpFilter
	if !e.NoAuthz {
		filters = append(filters,
			&hcmv3.HttpFilter{Name: "envoy.filters.http.rbac", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(rbac)}},
			&hcmv3.HttpFilter{Name: "envoy.filters.http.ext_authz", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(authz)}})
	}
	filters = append(filters, &hcmv3.HttpFilter{Name: "envoy.filters.http.router", ConfigType: &hcmv3.HttpFilter_TypedConfig{TypedConfig: anyOf(&routerv3.Router{})}})
	hcm := &hcmv3.HttpConnectionManager{
		StatPrefix:                  "outbound_0.0.0.0_443",
		RouteSpecifier:              &hcmv3.HttpConnectionManager_RouteConfig{RouteConfig: e.Routes()},
		HttpFilters:                 filters,
		ForwardClientCertDetails:    hcmv3.HttpConnectionManager_SANITIZE_SET,
		SetCurrentClientCertDetails: &hcmv3.HttpConnectionManager_SetCurrentClientCertDetails{Subject: wrapperspb.Bool(true), Cert: true, Uri: true, Dns: true},
		NormalizePath:               wrapperspb.Bool(true),
		UseRemoteAddress:            wrapperspb.Bool(true),
	}
	return &listenerv3.Listener{
		Name:    ListenerName,
		Address: socket("127.0.0.1", 0),
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
// connection failures and 503.
func (e Edge) Routes() *routev3.RouteConfiguration {
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
		Name: e.Host + ":443", Domains: []string{e.Host, e.Host + ":*"}, Routes: []*routev3.Route{r},
		IncludeRequestAttemptCount: true,
	}}}
}

// XFCC is the x-forwarded-client-cert element Envoy sets with SANITIZE_SET
// and Istio's gateway details (Subject, Cert, URI, DNS) for the client
// certificate leaf: Hash, then Cert (URL-encoded PEM, quoted), Subject
// (quoted), each URI SAN — an empty "URI=" when there is none (Envoy keeps
// the key) —, each DNS SAN.
func XFCC(leaf *x509.Certificate) string {
	sum := sha256.Sum256(leaf.Raw)
	parts := []string{"Hash=" + hex.EncodeToString(sum[:]),
		`Cert="` + xfcc.EncodeCert(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Raw})) + `"`,
		`Subject="` + strings.ReplaceAll(leaf.Subject.String(), `"`, `\"`) + `"`}
	for _, u := range leaf.URIs {
		parts = append(parts, "URI="+u.String())
	}
	if len(leaf.URIs) == 0 {
		parts = append(parts, "URI=")
	}
	for _, n := range leaf.DNSNames {
		parts = append(parts, "DNS="+n)
	}
	return strings.Join(parts, ";")
}
