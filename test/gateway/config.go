package gateway

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"regexp"
	"slices"
	"strings"
	"time"

	udpatypev1 "github.com/cncf/xds/go/udpa/type/v1"
	xdstypev3 "github.com/cncf/xds/go/xds/type/v3"
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
	rawbufferv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/raw_buffer/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	matcherv3 "github.com/envoyproxy/go-control-plane/envoy/type/matcher/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/structpb"
)

// snapshot is the compiled, accepted configuration: what the data path
// reads. It is never changed after it was installed.
type snapshot struct {
	listeners []*listener
	routes    map[string]*routeTable
	clusters  map[string]*cluster
	versions  map[string]string
	// refs are the EDS and RDS names the clusters and listeners name.
	refs map[string][]string
}

func (s *snapshot) references(t string) []string { return s.refs[t] }

type listener struct {
	name   string
	port   uint32
	chains []*filterChain
}

type filterChain struct {
	name        string
	serverNames []string
	tls         *downstreamTLS
	hcm         *httpConnManager
}

type downstreamTLS struct {
	// certSecret and caSecret are SDS names ("kubernetes://<secret>").
	certSecret, caSecret string
	requireClient        bool
	minVersion           uint16
	maxVersion           uint16
	alpn                 []string
	cipherSuites         []uint16
}

type fccMode int

const (
	fccSanitize fccMode = iota
	fccForwardOnly
	fccAppendForward
	fccSanitizeSet
	fccAlwaysForwardOnly
)

type xfccDetails struct{ subject, cert, chain, dns, uri bool }

type httpConnManager struct {
	rds           string
	inline        *routeTable
	fcc           fccMode
	details       xfccDetails
	normalizePath bool
	mergeSlashes  bool
	filters       []httpFilter
}

// httpFilter is one of the implemented HTTP filters, in the listener's
// order: rbac (shadow rules only), ext_authz or router.
type httpFilter struct {
	name  string
	rbac  *rbacFilter
	authz *extAuthzFilter
}

type rbacFilter struct {
	shadow *rbacEngine
	// prefix is shadow_rules_stat_prefix, which prefixes the dynamic
	// metadata keys the shadow engine writes.
	prefix string
}

type extAuthzFilter struct {
	cluster         string
	timeout         time.Duration
	failureModeOpen bool
	statusOnError   int
	includePeerCert bool
	// enabled, when set, is filter_enabled_metadata: the filter runs only
	// for requests whose dynamic metadata matches.
	enabled *metadataMatch
}

type metadataMatch struct {
	filter string
	key    string
	value  stringMatch
}

type routeTable struct {
	name   string
	vhosts []*virtualHost
}

type virtualHost struct {
	name                string
	domains             []string
	routes              []*route
	includeAttemptCount bool
}

type route struct {
	name  string
	match pathMatch
	// Exactly one of cluster and direct.
	cluster string
	timeout time.Duration
	retry   *retryPolicy
	direct  *directResponse
}

type pathMatch struct {
	prefix, path  string
	regex         *regexp.Regexp
	caseSensitive bool
}

type retryPolicy struct {
	on            []string
	retries       int
	perTryTimeout time.Duration
	statusCodes   []int
}

type directResponse struct {
	status int
	body   string
}

type cluster struct {
	// tlsMatches are the endpoint metadata that select upstream TLS
	// (Istio's tlsMode=istio); an endpoint that has them is refused.
	tlsMatches     []*structpb.Struct
	name           string
	eds            string // EDS service name; "" for a STATIC cluster
	connectTimeout time.Duration
	endpoints      []string
	http2          bool
}

// compile builds the snapshot of r; an unimplemented feature is an error.
// Resources not yet received (the RDS of a new listener, the EDS of a new
// cluster) are not an error: a request that needs them is answered as
// Envoy answers it before they arrive.
func compile(r resources) (*snapshot, error) {
	s := &snapshot{routes: map[string]*routeTable{}, clusters: map[string]*cluster{}, versions: r.versions, refs: map[string][]string{}}
	var errs []error
	for _, name := range sortedKeys(r.byType[typeCluster]) {
		c, err := compileCluster(r.byType[typeCluster][name].(*clusterv3.Cluster))
		if err != nil {
			errs = append(errs, fmt.Errorf("cluster %s: %w", name, err))
			continue
		}
		if c.eds != "" {
			s.refs[typeEndpoints] = append(s.refs[typeEndpoints], c.eds)
			if cla, ok := r.byType[typeEndpoints][c.eds]; ok {
				cla := cla.(*endpointv3.ClusterLoadAssignment)
				if c.endpoints, err = compileEndpoints(cla); err == nil {
					err = c.plaintext(cla)
				}
				if err != nil {
					errs = append(errs, fmt.Errorf("endpoints of cluster %s: %w", name, err))
				}
			}
		}
		s.clusters[name] = c
	}
	for _, name := range sortedKeys(r.byType[typeListener]) {
		l, err := compileListener(r.byType[typeListener][name].(*listenerv3.Listener))
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", name, err))
			continue
		}
		for _, fc := range l.chains {
			if fc.hcm.rds != "" && !slices.Contains(s.refs[typeRoute], fc.hcm.rds) {
				s.refs[typeRoute] = append(s.refs[typeRoute], fc.hcm.rds)
			}
		}
		s.listeners = append(s.listeners, l)
	}
	slices.Sort(s.refs[typeEndpoints])
	s.refs[typeEndpoints] = slices.Compact(s.refs[typeEndpoints])
	slices.Sort(s.refs[typeRoute])
	for _, name := range sortedKeys(r.byType[typeRoute]) {
		rt, err := compileRouteTable(r.byType[typeRoute][name].(*routev3.RouteConfiguration))
		if err != nil {
			errs = append(errs, fmt.Errorf("route configuration %s: %w", name, err))
			continue
		}
		s.routes[name] = rt
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return s, nil
}

// onlyFields fails when m sets a field not named in implemented: an xDS
// feature the stand-in does not implement is refused, never ignored. The
// names are the proto field names; fields listed as accepted without effect
// are named in the package comment.
func onlyFields(m proto.Message, implemented ...string) error {
	var unknown []string
	m.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !slices.Contains(implemented, string(fd.Name())) {
			unknown = append(unknown, string(fd.Name()))
		}
		return true
	})
	if len(m.ProtoReflect().GetUnknown()) > 0 {
		unknown = append(unknown, "(unknown fields)")
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%s: %s not implemented by the gateway stand-in", m.ProtoReflect().Descriptor().FullName(), strings.Join(unknown, ", "))
	}
	return nil
}

// Fields that shape statistics, logs, tracing or resource limits only:
// accepted without effect (the package comment lists them).
var (
	observabilityListener = []string{"stat_prefix", "access_log", "traffic_direction", "continue_on_listener_filters_timeout", "per_connection_buffer_limit_bytes", "listener_filters_timeout", "metadata", "max_connections_to_accept_per_socket_event"}
	observabilityHCM      = []string{"stat_prefix", "access_log", "tracing", "server_name", "generate_request_id", "preserve_external_request_id", "request_id_extension", "stream_idle_timeout", "common_http_protocol_options", "http_protocol_options", "http2_protocol_options", "delayed_close_timeout", "use_remote_address", "xff_num_trusted_hops", "internal_address_config", "access_log_options", "codec_type",
		// Go's server answers "Expect: 100-continue" itself, as Envoy with proxy_100_continue
		// forwards the 100 before the body.
		"proxy_100_continue"}
	observabilityCluster = []string{"common_lb_config", "circuit_breakers", "filters", "metadata", "dns_lookup_family", "lb_policy", "outlier_detection", "common_http_protocol_options", "max_requests_per_connection", "upstream_connection_options", "per_connection_buffer_limit_bytes", "alt_stat_name", "cleanup_interval", "track_cluster_stats"}
)

func compileListener(l *listenerv3.Listener) (*listener, error) {
	if err := onlyFields(l, append([]string{"name", "address", "filter_chains", "listener_filters"}, observabilityListener...)...); err != nil {
		return nil, err
	}
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil || sa.GetPortValue() == 0 || sa.GetProtocol() != corev3.SocketAddress_TCP {
		return nil, fmt.Errorf("address %v: only a TCP socket address with a port is implemented", l.GetAddress())
	}
	for _, lf := range l.GetListenerFilters() {
		// The TLS inspector reads the SNI that filter chains match on;
		// Go's TLS server reads it in the handshake.
		if _, err := typedConfig(lf.GetTypedConfig(), &tlsinspectorv3.TlsInspector{}); err != nil {
			return nil, fmt.Errorf("listener filter %s: %w", lf.GetName(), err)
		}
	}
	out := &listener{name: l.GetName(), port: sa.GetPortValue()}
	for _, fc := range l.GetFilterChains() {
		c, err := compileFilterChain(fc)
		if err != nil {
			return nil, fmt.Errorf("filter chain %s: %w", fc.GetName(), err)
		}
		out.chains = append(out.chains, c)
	}
	if len(out.chains) == 0 {
		return nil, errors.New("no filter chain")
	}
	return out, nil
}

func compileFilterChain(fc *listenerv3.FilterChain) (*filterChain, error) {
	// transport_socket_connect_timeout bounds the handshake: the listener's
	// header read timeout bounds it here.
	if err := onlyFields(fc, "name", "filter_chain_match", "transport_socket", "filters", "metadata", "transport_socket_connect_timeout"); err != nil {
		return nil, err
	}
	out := &filterChain{name: fc.GetName()}
	if m := fc.GetFilterChainMatch(); m != nil {
		// transport_protocol "tls" is what every TLS chain here is.
		if err := onlyFields(m, "server_names", "transport_protocol"); err != nil {
			return nil, err
		}
		if tp := m.GetTransportProtocol(); tp != "" && tp != "tls" {
			return nil, fmt.Errorf("transport_protocol %q not implemented", tp)
		}
		out.serverNames = m.GetServerNames()
	}
	ts := fc.GetTransportSocket()
	if ts == nil {
		return nil, errors.New("a chain without TLS is not implemented (the watcher gateway is MUTUAL)")
	}
	dtc := &tlsv3.DownstreamTlsContext{}
	if _, err := typedConfig(ts.GetTypedConfig(), dtc); err != nil {
		return nil, fmt.Errorf("transport socket %s: %w", ts.GetName(), err)
	}
	var err error
	if out.tls, err = compileDownstreamTLS(dtc); err != nil {
		return nil, err
	}
	if len(fc.GetFilters()) != 1 {
		return nil, fmt.Errorf("%d network filters: only one http_connection_manager is implemented", len(fc.GetFilters()))
	}
	h := &hcmv3.HttpConnectionManager{}
	if _, err := typedConfig(fc.GetFilters()[0].GetTypedConfig(), h); err != nil {
		return nil, fmt.Errorf("network filter %s: %w", fc.GetFilters()[0].GetName(), err)
	}
	if out.hcm, err = compileHCM(h); err != nil {
		return nil, err
	}
	return out, nil
}

var tlsVersions = map[tlsv3.TlsParameters_TlsProtocol]uint16{
	tlsv3.TlsParameters_TLS_AUTO: 0,
	tlsv3.TlsParameters_TLSv1_2:  tls.VersionTLS12,
	tlsv3.TlsParameters_TLSv1_3:  tls.VersionTLS13,
}

func compileDownstreamTLS(d *tlsv3.DownstreamTlsContext) (*downstreamTLS, error) {
	if err := onlyFields(d, "common_tls_context", "require_client_certificate"); err != nil {
		return nil, err
	}
	c := d.GetCommonTlsContext()
	if err := onlyFields(c, "tls_params", "tls_certificate_sds_secret_configs", "combined_validation_context", "validation_context_sds_secret_config", "alpn_protocols"); err != nil {
		return nil, err
	}
	out := &downstreamTLS{requireClient: d.GetRequireClientCertificate().GetValue(), alpn: c.GetAlpnProtocols()}
	if p := c.GetTlsParams(); p != nil {
		if err := onlyFields(p, "tls_minimum_protocol_version", "tls_maximum_protocol_version", "cipher_suites"); err != nil {
			return nil, err
		}
		var ok bool
		if out.minVersion, ok = tlsVersions[p.GetTlsMinimumProtocolVersion()]; !ok {
			return nil, fmt.Errorf("minimum TLS version %s not implemented", p.GetTlsMinimumProtocolVersion())
		}
		if out.maxVersion, ok = tlsVersions[p.GetTlsMaximumProtocolVersion()]; !ok {
			return nil, fmt.Errorf("maximum TLS version %s not implemented", p.GetTlsMaximumProtocolVersion())
		}
		for _, name := range p.GetCipherSuites() {
			id, err := cipherSuite(name)
			if err != nil {
				return nil, err
			}
			out.cipherSuites = append(out.cipherSuites, id)
		}
	}
	certs := c.GetTlsCertificateSdsSecretConfigs()
	if len(certs) != 1 {
		return nil, fmt.Errorf("%d SDS certificates: exactly one is implemented", len(certs))
	}
	if err := sdsOverADS(certs[0]); err != nil {
		return nil, err
	}
	out.certSecret = certs[0].GetName()
	var ca *tlsv3.SdsSecretConfig
	switch {
	case c.GetCombinedValidationContext() != nil:
		cv := c.GetCombinedValidationContext()
		if err := onlyFields(cv, "default_validation_context", "validation_context_sds_secret_config"); err != nil {
			return nil, err
		}
		// An empty default context: no SAN or hash pinning to implement.
		if err := onlyFields(cv.GetDefaultValidationContext()); cv.GetDefaultValidationContext() != nil && err != nil {
			return nil, err
		}
		ca = cv.GetValidationContextSdsSecretConfig()
	case c.GetValidationContextSdsSecretConfig() != nil:
		ca = c.GetValidationContextSdsSecretConfig()
	}
	if ca != nil {
		if err := sdsOverADS(ca); err != nil {
			return nil, err
		}
		out.caSecret = ca.GetName()
	}
	if out.requireClient && out.caSecret == "" {
		return nil, errors.New("client certificates required without a validation context")
	}
	return out, nil
}

// cipherSuite maps a BoringSSL cipher name (what Envoy's cipher_suites
// hold) to Go's suite of the same algorithms.
func cipherSuite(name string) (uint16, error) {
	for _, cs := range append(tls.CipherSuites(), tls.InsecureCipherSuites()...) {
		if cs.Name == goCipherName(name) {
			return cs.ID, nil
		}
	}
	return 0, fmt.Errorf("cipher suite %s not implemented by Go's TLS", name)
}

// goCipherName: ECDHE-ECDSA-AES128-GCM-SHA256 → TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256.
func goCipherName(boring string) string {
	parts := strings.Split(boring, "-")
	if len(parts) < 3 {
		return boring
	}
	kx := []string{}
	i := 0
	for ; i < len(parts) && (parts[i] == "ECDHE" || parts[i] == "ECDSA" || parts[i] == "RSA"); i++ {
		kx = append(kx, parts[i])
	}
	switch {
	case len(kx) == 0:
		kx = []string{"RSA"}
	case len(kx) == 1 && kx[0] == "ECDHE":
		kx = append(kx, "RSA")
	}
	rest := parts[i:]
	var cipher []string
	for _, p := range rest {
		switch {
		case strings.HasPrefix(p, "AES") && len(p) > 3:
			cipher = append(cipher, "AES", p[3:])
		case p == "CHACHA20":
			cipher = append(cipher, "CHACHA20")
		case p == "POLY1305":
			cipher = append(cipher, "POLY1305")
			cipher = append(cipher, "SHA256")
		default:
			cipher = append(cipher, p)
		}
	}
	return "TLS_" + strings.Join(kx, "_") + "_WITH_" + strings.Join(cipher, "_")
}

func sdsOverADS(s *tlsv3.SdsSecretConfig) error {
	if err := onlyFields(s, "name", "sds_config"); err != nil {
		return err
	}
	if !strings.HasPrefix(s.GetName(), "kubernetes://") {
		return fmt.Errorf("SDS secret %q: only kubernetes:// (credentialName) secrets are implemented", s.GetName())
	}
	return nil
}

var fccModes = map[hcmv3.HttpConnectionManager_ForwardClientCertDetails]fccMode{
	hcmv3.HttpConnectionManager_SANITIZE:            fccSanitize,
	hcmv3.HttpConnectionManager_FORWARD_ONLY:        fccForwardOnly,
	hcmv3.HttpConnectionManager_APPEND_FORWARD:      fccAppendForward,
	hcmv3.HttpConnectionManager_SANITIZE_SET:        fccSanitizeSet,
	hcmv3.HttpConnectionManager_ALWAYS_FORWARD_ONLY: fccAlwaysForwardOnly,
}

func compileHCM(h *hcmv3.HttpConnectionManager) (*httpConnManager, error) {
	if err := onlyFields(h, append([]string{"rds", "route_config", "http_filters", "forward_client_cert_details",
		"set_current_client_cert_details", "normalize_path", "merge_slashes", "path_with_escaped_slashes_action", "upgrade_configs"}, observabilityHCM...)...); err != nil {
		return nil, err
	}
	// Upgrades (WebSocket) are not implemented: an Upgrade request is
	// refused with 501 (serveHTTP), whatever upgrade_configs allow.
	for _, u := range h.GetUpgradeConfigs() {
		if !strings.EqualFold(u.GetUpgradeType(), "websocket") || u.GetEnabled() != nil && !u.GetEnabled().GetValue() || len(u.GetFilters()) > 0 {
			return nil, fmt.Errorf("upgrade config %s not implemented", u.GetUpgradeType())
		}
	}
	out := &httpConnManager{fcc: fccModes[h.GetForwardClientCertDetails()], normalizePath: h.GetNormalizePath().GetValue(), mergeSlashes: h.GetMergeSlashes()}
	if a := h.GetPathWithEscapedSlashesAction(); a != hcmv3.HttpConnectionManager_IMPLEMENTATION_SPECIFIC_DEFAULT && a != hcmv3.HttpConnectionManager_KEEP_UNCHANGED {
		return nil, fmt.Errorf("path_with_escaped_slashes_action %s not implemented", a)
	}
	if d := h.GetSetCurrentClientCertDetails(); d != nil {
		out.details = xfccDetails{subject: d.GetSubject().GetValue(), cert: d.GetCert(), chain: d.GetChain(), dns: d.GetDns(), uri: d.GetUri()}
	}
	switch {
	case h.GetRds() != nil:
		if h.GetRds().GetConfigSource().GetAds() == nil {
			return nil, errors.New("RDS from a config source other than ADS is not implemented")
		}
		out.rds = h.GetRds().GetRouteConfigName()
	case h.GetRouteConfig() != nil:
		rt, err := compileRouteTable(h.GetRouteConfig())
		if err != nil {
			return nil, err
		}
		out.inline = rt
	default:
		return nil, errors.New("no route configuration")
	}
	routerSeen := false
	for _, f := range h.GetHttpFilters() {
		if routerSeen {
			return nil, fmt.Errorf("HTTP filter %s after the router", f.GetName())
		}
		if f.GetIsOptional() || f.GetDisabled() {
			return nil, fmt.Errorf("HTTP filter %s: optional or disabled filters are not implemented", f.GetName())
		}
		hf, err := compileHTTPFilter(f)
		if err != nil {
			return nil, fmt.Errorf("HTTP filter %s: %w", f.GetName(), err)
		}
		if hf == nil {
			continue // observability only
		}
		routerSeen = hf.name == routerFilter
		out.filters = append(out.filters, *hf)
	}
	if !routerSeen {
		return nil, errors.New("no router filter")
	}
	return out, nil
}

const routerFilter = "envoy.filters.http.router"

// observabilityFilters are HTTP filters (by config type, inside a
// TypedStruct where Istio wraps it) that only count or label requests:
// Istio's statistics and peer metadata, gRPC statistics. Accepted without
// effect. A filter that may change a request's outcome is not here.
var observabilityFilters = []string{
	"type.googleapis.com/stats.PluginConfig",
	"type.googleapis.com/io.istio.http.peer_metadata.Config",
	"type.googleapis.com/envoy.extensions.filters.http.grpc_stats.v3.FilterConfig",
	// istio.alpn sets the ALPN of upstream TLS connections; upstream TLS is
	// refused (compileCluster), so it has nothing to act on.
	"type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig",
}

// inertWhenEmpty are HTTP filters that act only by per-route configuration
// (a fault or a CORS policy on a route, refused by compileRoute) or by their
// own; with an empty filter config they do nothing.
var inertWhenEmpty = []string{
	"type.googleapis.com/envoy.extensions.filters.http.fault.v3.HTTPFault",
	"type.googleapis.com/envoy.extensions.filters.http.cors.v3.Cors",
}

func compileHTTPFilter(f *hcmv3.HttpFilter) (*httpFilter, error) {
	tc := f.GetTypedConfig()
	if tc == nil {
		return nil, errors.New("no typed_config")
	}
	switch tc.GetTypeUrl() {
	case typeURL(&routerv3.Router{}):
		r := &routerv3.Router{}
		if _, err := typedConfig(tc, r); err != nil {
			return nil, err
		}
		if err := onlyFields(r, "start_child_span", "suppress_envoy_headers", "dynamic_stats"); err != nil {
			return nil, err
		}
		return &httpFilter{name: routerFilter}, nil
	case typeURL(&rbacv3.RBAC{}):
		r := &rbacv3.RBAC{}
		if _, err := typedConfig(tc, r); err != nil {
			return nil, err
		}
		rf, err := compileRBACFilter(r)
		if err != nil {
			return nil, err
		}
		return &httpFilter{name: f.GetName(), rbac: rf}, nil
	case typeURL(&extauthzv3.ExtAuthz{}):
		a := &extauthzv3.ExtAuthz{}
		if _, err := typedConfig(tc, a); err != nil {
			return nil, err
		}
		af, err := compileExtAuthz(a)
		if err != nil {
			return nil, err
		}
		return &httpFilter{name: f.GetName(), authz: af}, nil
	}
	inner := tc.GetTypeUrl()
	switch inner {
	case typeURL(&udpatypev1.TypedStruct{}):
		ts := &udpatypev1.TypedStruct{}
		if err := tc.UnmarshalTo(ts); err != nil {
			return nil, err
		}
		inner = ts.GetTypeUrl()
	case typeURL(&xdstypev3.TypedStruct{}):
		ts := &xdstypev3.TypedStruct{}
		if err := tc.UnmarshalTo(ts); err != nil {
			return nil, err
		}
		inner = ts.GetTypeUrl()
	}
	if slices.Contains(observabilityFilters, inner) {
		return nil, nil
	}
	if slices.Contains(inertWhenEmpty, inner) && len(tc.GetValue()) == 0 {
		return nil, nil
	}
	return nil, fmt.Errorf("filter type %s not implemented", inner)
}

func compileRBACFilter(r *rbacv3.RBAC) (*rbacFilter, error) {
	// Enforced rules (ALLOW/DENY AuthorizationPolicies) are not
	// implemented; Istio's CUSTOM action produces shadow rules only.
	if err := onlyFields(r, "shadow_rules", "shadow_rules_stat_prefix"); err != nil {
		return nil, err
	}
	eng, err := compileRBAC(r.GetShadowRules())
	if err != nil {
		return nil, err
	}
	return &rbacFilter{shadow: eng, prefix: r.GetShadowRulesStatPrefix()}, nil
}

func compileExtAuthz(a *extauthzv3.ExtAuthz) (*extAuthzFilter, error) {
	if err := onlyFields(a, "grpc_service", "transport_api_version", "failure_mode_allow", "status_on_error",
		"filter_enabled_metadata", "include_peer_certificate", "stat_prefix", "clear_route_cache"); err != nil {
		return nil, err
	}
	if a.GetTransportApiVersion() != corev3.ApiVersion_V3 {
		return nil, fmt.Errorf("transport API version %s not implemented", a.GetTransportApiVersion())
	}
	gs := a.GetGrpcService()
	if err := onlyFields(gs, "envoy_grpc", "timeout"); err != nil {
		return nil, err
	}
	if err := onlyFields(gs.GetEnvoyGrpc(), "cluster_name", "authority"); err != nil {
		return nil, err
	}
	out := &extAuthzFilter{
		cluster:         gs.GetEnvoyGrpc().GetClusterName(),
		timeout:         duration(gs.GetTimeout(), 200*time.Millisecond), // Envoy's default for the gRPC service
		failureModeOpen: a.GetFailureModeAllow(),
		statusOnError:   int(a.GetStatusOnError().GetCode()),
		includePeerCert: a.GetIncludePeerCertificate(),
	}
	if out.cluster == "" {
		return nil, errors.New("no cluster")
	}
	if out.statusOnError == 0 {
		out.statusOnError = 403 // Envoy's default status_on_error: Forbidden
	}
	if m := a.GetFilterEnabledMetadata(); m != nil {
		mm, err := compileMetadataMatch(m)
		if err != nil {
			return nil, err
		}
		out.enabled = mm
	}
	return out, nil
}

func compileMetadataMatch(m *matcherv3.MetadataMatcher) (*metadataMatch, error) {
	if err := onlyFields(m, "filter", "path", "value"); err != nil {
		return nil, err
	}
	if len(m.GetPath()) != 1 {
		return nil, errors.New("metadata matcher: a path of one key is implemented")
	}
	if err := onlyFields(m.GetValue(), "string_match"); err != nil {
		return nil, err
	}
	sm, err := compileStringMatch(m.GetValue().GetStringMatch())
	if err != nil {
		return nil, err
	}
	return &metadataMatch{filter: m.GetFilter(), key: m.GetPath()[0].GetKey(), value: sm}, nil
}

func compileRouteTable(rc *routev3.RouteConfiguration) (*routeTable, error) {
	if err := onlyFields(rc, "name", "virtual_hosts", "validate_clusters", "max_direct_response_body_size_bytes", "ignore_port_in_host_matching"); err != nil {
		return nil, err
	}
	out := &routeTable{name: rc.GetName()}
	for _, vh := range rc.GetVirtualHosts() {
		if err := onlyFields(vh, "name", "domains", "routes", "include_request_attempt_count", "include_attempt_count_in_response", "metadata"); err != nil {
			return nil, fmt.Errorf("virtual host %s: %w", vh.GetName(), err)
		}
		v := &virtualHost{name: vh.GetName(), domains: vh.GetDomains(), includeAttemptCount: vh.GetIncludeRequestAttemptCount()}
		for _, r := range vh.GetRoutes() {
			cr, err := compileRoute(r)
			if err != nil {
				return nil, fmt.Errorf("virtual host %s, route %s: %w", vh.GetName(), r.GetName(), err)
			}
			v.routes = append(v.routes, cr)
		}
		out.vhosts = append(out.vhosts, v)
	}
	return out, nil
}

func compileRoute(r *routev3.Route) (*route, error) {
	if err := onlyFields(r, "name", "match", "route", "direct_response", "decorator", "metadata"); err != nil {
		return nil, err
	}
	out := &route{name: r.GetName()}
	m := r.GetMatch()
	if err := onlyFields(m, "prefix", "path", "safe_regex", "case_sensitive"); err != nil {
		return nil, err
	}
	out.match = pathMatch{prefix: m.GetPrefix(), path: m.GetPath(), caseSensitive: m.GetCaseSensitive() == nil || m.GetCaseSensitive().GetValue()}
	if re := m.GetSafeRegex(); re != nil {
		var err error
		// Envoy's safe_regex must match the whole path (RE2, as Go's regexp).
		if out.match.regex, err = regexp.Compile("^(?:" + re.GetRegex() + ")$"); err != nil {
			return nil, err
		}
	}
	if m.GetPathSpecifier() == nil {
		return nil, errors.New("route match without a path specifier")
	}
	switch {
	case r.GetDirectResponse() != nil:
		d := r.GetDirectResponse()
		if err := onlyFields(d, "status", "body"); err != nil {
			return nil, err
		}
		if err := onlyFields(d.GetBody(), "inline_string"); d.GetBody() != nil && err != nil {
			return nil, err
		}
		out.direct = &directResponse{status: int(d.GetStatus()), body: d.GetBody().GetInlineString()}
	case r.GetRoute() != nil:
		a := r.GetRoute()
		// max_stream_duration and hash_policy shape long streams and
		// consistent hashing, neither of which the stand-in has.
		if err := onlyFields(a, "cluster", "timeout", "retry_policy", "max_stream_duration", "hash_policy", "max_grpc_timeout"); err != nil {
			return nil, err
		}
		if a.GetCluster() == "" {
			return nil, errors.New("only a route to one cluster is implemented")
		}
		out.cluster = a.GetCluster()
		out.timeout = duration(a.GetTimeout(), 15*time.Second) // Envoy's default route timeout
		if rp := a.GetRetryPolicy(); rp != nil {
			p, err := compileRetry(rp)
			if err != nil {
				return nil, err
			}
			out.retry = p
		}
	default:
		return nil, errors.New("only route and direct_response actions are implemented")
	}
	return out, nil
}

// retryOn are the retry_on conditions implemented
// (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter#x-envoy-retry-on).
var retryOn = []string{"5xx", "gateway-error", "reset", "connect-failure", "refused-stream", "unavailable", "cancelled", "retriable-status-codes"}

func compileRetry(rp *routev3.RetryPolicy) (*retryPolicy, error) {
	// retry_host_predicate previous_hosts and host_selection_retry_max_attempts
	// pick another endpoint for a retry: the stand-in's round robin does.
	if err := onlyFields(rp, "retry_on", "num_retries", "per_try_timeout", "retriable_status_codes", "retry_host_predicate", "host_selection_retry_max_attempts"); err != nil {
		return nil, err
	}
	for _, p := range rp.GetRetryHostPredicate() {
		if p.GetName() != "envoy.retry_host_predicates.previous_hosts" {
			return nil, fmt.Errorf("retry host predicate %s not implemented", p.GetName())
		}
	}
	out := &retryPolicy{retries: 1, perTryTimeout: duration(rp.GetPerTryTimeout(), 0)}
	if rp.GetNumRetries() != nil {
		out.retries = int(rp.GetNumRetries().GetValue())
	}
	for _, on := range strings.Split(rp.GetRetryOn(), ",") {
		on = strings.TrimSpace(on)
		if on == "" {
			continue
		}
		if !slices.Contains(retryOn, on) {
			return nil, fmt.Errorf("retry_on %q not implemented", on)
		}
		out.on = append(out.on, on)
	}
	for _, c := range rp.GetRetriableStatusCodes() {
		out.statusCodes = append(out.statusCodes, int(c))
	}
	return out, nil
}

func compileCluster(c *clusterv3.Cluster) (*cluster, error) {
	if err := onlyFields(c, append([]string{"name", "type", "eds_cluster_config", "load_assignment", "connect_timeout",
		"transport_socket_matches", "transport_socket", "typed_extension_protocol_options", "http2_protocol_options"}, observabilityCluster...)...); err != nil {
		return nil, err
	}
	out := &cluster{name: c.GetName(), connectTimeout: duration(c.GetConnectTimeout(), 5*time.Second)}
	switch c.GetType() {
	case clusterv3.Cluster_EDS:
		if c.GetEdsClusterConfig().GetEdsConfig().GetAds() == nil {
			return nil, errors.New("EDS from a config source other than ADS is not implemented")
		}
		out.eds = c.GetEdsClusterConfig().GetServiceName()
		if out.eds == "" {
			out.eds = c.GetName()
		}
	case clusterv3.Cluster_STATIC:
		eps, err := compileEndpoints(c.GetLoadAssignment())
		if err != nil {
			return nil, err
		}
		out.endpoints = eps
	default:
		return nil, fmt.Errorf("cluster type %s not implemented", c.GetType())
	}
	// Upstream TLS is not implemented: a cluster may offer Istio's mTLS
	// for endpoints labelled tlsMode=istio (none are here), its default
	// must be plaintext.
	if ts := c.GetTransportSocket(); ts != nil && !rawBuffer(ts) {
		return nil, fmt.Errorf("transport socket %s not implemented (upstream TLS)", ts.GetName())
	}
	for _, m := range c.GetTransportSocketMatches() {
		if len(m.GetMatch().GetFields()) == 0 && !rawBuffer(m.GetTransportSocket()) {
			return nil, fmt.Errorf("default transport socket %s not implemented (upstream TLS)", m.GetName())
		}
	}
	for name, opt := range c.GetTypedExtensionProtocolOptions() {
		hpo := &upstreamhttpv3.HttpProtocolOptions{}
		if _, err := typedConfig(opt, hpo); err != nil || name != "envoy.extensions.upstreams.http.v3.HttpProtocolOptions" {
			return nil, fmt.Errorf("protocol options %s not implemented", name)
		}
		// HTTP/2 upstreams (a gRPC service's cluster): ext_authz's gRPC
		// client speaks HTTP/2; a route to such a cluster is refused.
		out.http2 = hpo.GetExplicitHttpConfig().GetHttp2ProtocolOptions() != nil
	}
	for _, m := range c.GetTransportSocketMatches() {
		if !rawBuffer(m.GetTransportSocket()) {
			out.tlsMatches = append(out.tlsMatches, m.GetMatch())
		}
	}
	return out, nil
}

// plaintext fails when an endpoint's metadata selects a TLS transport
// socket of the cluster (upstream TLS is not implemented).
func (c *cluster) plaintext(cla *endpointv3.ClusterLoadAssignment) error {
	for _, le := range cla.GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			md := lb.GetMetadata().GetFilterMetadata()["envoy.transport_socket_match"].GetFields()
			for _, m := range c.tlsMatches {
				if len(m.GetFields()) == 0 {
					continue // the default match is checked by compileCluster
				}
				all := true
				for k, v := range m.GetFields() {
					if !proto.Equal(md[k], v) {
						all = false
					}
				}
				if all {
					return fmt.Errorf("endpoint %v selects upstream TLS (transport socket match %v): not implemented", lb.GetEndpoint().GetAddress(), m)
				}
			}
		}
	}
	return nil
}

func rawBuffer(ts *corev3.TransportSocket) bool {
	if ts == nil {
		return true
	}
	if ts.GetTypedConfig() == nil {
		return ts.GetName() == "envoy.transport_sockets.raw_buffer"
	}
	return ts.GetTypedConfig().GetTypeUrl() == typeURL(&rawbufferv3.RawBuffer{})
}

func compileEndpoints(cla *endpointv3.ClusterLoadAssignment) ([]string, error) {
	var out []string
	for _, le := range cla.GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			if lb.GetHealthStatus() == corev3.HealthStatus_UNHEALTHY || lb.GetHealthStatus() == corev3.HealthStatus_DRAINING {
				continue
			}
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			if sa == nil || sa.GetPortValue() == 0 {
				return nil, fmt.Errorf("endpoint %v: only socket addresses with a port are implemented", lb.GetEndpoint().GetAddress())
			}
			out = append(out, net.JoinHostPort(sa.GetAddress(), fmt.Sprint(sa.GetPortValue())))
		}
	}
	return out, nil
}

func typedConfig(a *anypb.Any, into proto.Message) (proto.Message, error) {
	if a == nil {
		return nil, errors.New("no typed_config")
	}
	if a.GetTypeUrl() != typeURL(into) {
		return nil, fmt.Errorf("config type %s not implemented", a.GetTypeUrl())
	}
	if err := a.UnmarshalTo(into); err != nil {
		return nil, err
	}
	return into, nil
}

func duration(d *durationpb.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return d.AsDuration()
}

// rbacEngine is an RBAC rule set: policies evaluated in name order
// (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/rbac/v3/rbac.proto).
type rbacEngine struct {
	action   rbacconfigv3.RBAC_Action
	policies []rbacPolicy
}

type rbacPolicy struct {
	name        string
	permissions []*rbacRule
	principals  []*rbacRule
}
