// Package gateway stands in for the Envoy data plane of the Istio ingress
// gateway in local runs and tests, because Envoy cannot run on machines
// without containers. The control plane is real: the stand-in is an xDS
// client of istiod (ADS over gRPC, as Envoy's, with the node id and labels
// of the ingress gateway) and does what istiod's configuration tells it,
// nothing it decides itself. It reads no Istio resource: its listeners,
// TLS, XFCC handling, ext_authz, routes and clusters are istiod's LDS, RDS,
// CDS and EDS.
//
// The Envoy behaviours it implements, each as the Envoy documentation it
// follows describes it:
//
//   - ADS, state of the world: CDS and LDS by wildcard, EDS and RDS by the
//     names clusters and listeners give, ACK with the version, NACK with an
//     error detail keeping the previous configuration
//     (https://www.envoyproxy.io/docs/envoy/latest/api-docs/xds_protocol).
//   - Listeners on their port (bound on loopback), the TLS inspector, filter
//     chains chosen by SNI: exact server name, then the longest wildcard,
//     then a chain without server names; no match closes the connection
//     (https://www.envoyproxy.io/docs/envoy/latest/api-v3/config/listener/v3/listener_components.proto#config-listener-v3-filterchainmatch).
//   - Downstream TLS (DownstreamTlsContext): require_client_certificate,
//     minimum/maximum version, cipher suites, ALPN; the certificate and the
//     validation context are the SDS secrets istiod names for a Gateway's
//     credentialName, kubernetes://<name> and kubernetes://<name>-cacert,
//     read as the Secrets of those names in the gateway's namespace (istiod
//     serves SDS only to an authenticated proxy, which the stand-in on
//     istiod's plaintext port is not); each handshake's version and cipher
//     suite counted as Envoy's listener ssl.versions and ssl.ciphers statistics
//     (gateway_downstream_tls_handshakes_total)
//     (https://www.envoyproxy.io/docs/envoy/latest/api-v3/extensions/transport_sockets/tls/v3/tls.proto).
//   - The HTTP connection manager: normalize_path and merge_slashes,
//     forward_client_cert_details (SANITIZE, FORWARD_ONLY, APPEND_FORWARD,
//     SANITIZE_SET, ALWAYS_FORWARD_ONLY) with set_current_client_cert_details
//     (By, Hash, Cert, Chain, Subject, URI, DNS)
//     (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_conn_man/headers#x-forwarded-client-cert).
//   - The RBAC HTTP filter's shadow rules (permissions any/and/or/not,
//     url_path, header, destination_port; principals any/and/or/not,
//     authenticated, header): the matched policy becomes the dynamic metadata
//     <shadow_rules_stat_prefix>shadow_effective_policy_id, which is how
//     Istio's CUSTOM AuthorizationPolicy enables ext_authz; enforced rules are
//     not implemented
//     (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/rbac_filter).
//   - The ext_authz HTTP filter with a gRPC service: filter_enabled_metadata,
//     the service's cluster and timeout, include_peer_certificate, a CheckRequest
//     as Envoy fills it, a denied answer with its status, headers and body
//     (403 when it sets none), an OK answer's header mutations, and on an
//     error or timeout failure_mode_allow or status_on_error (403 by default)
//     (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/ext_authz_filter).
//   - The router: virtual hosts by domain (exact, suffix wildcard, prefix
//     wildcard, "*"), routes by prefix, exact path or safe_regex, case
//     (in)sensitive, direct responses, the route timeout (15 s by default),
//     retries (retry_on 5xx, gateway-error, reset, connect-failure,
//     refused-stream, unavailable, cancelled, retriable-status-codes;
//     num_retries, per_try_timeout, a jittered 25 ms back-off) with
//     x-envoy-attempt-count, 404 without a route, 503 without a cluster or
//     endpoint, 504 on a timeout
//     (https://www.envoyproxy.io/docs/envoy/latest/configuration/http/http_filters/router_filter).
//   - Clusters of type EDS (from ADS) and STATIC, round robin over their
//     endpoints, connect_timeout, plaintext upstreams
//     (https://www.envoyproxy.io/docs/envoy/latest/intro/arch_overview/upstream/service_discovery).
//
// Every other xDS field that is set is refused loudly: logged, counted in
// gateway_xds_updates_total{result="nack"} and NACKed, so a configuration
// the stand-in cannot honour never passes as one it does. Fields that only
// shape statistics, logs, tracing, buffer or connection limits are accepted
// without effect (config.go lists them: observabilityListener,
// observabilityHCM, observabilityCluster, observabilityFilters).
package gateway

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Node is the proxy identity the stand-in presents to istiod: what an
// ingress gateway pod's istio-agent would send.
type Node struct {
	// Name and Namespace of the gateway "pod"; Labels its labels (which
	// Gateways and AuthorizationPolicies select).
	Name, Namespace string
	Labels          map[string]string
	// IP is the pod's address (the node id's second part).
	IP string
	// ClusterID is istiod's cluster name ("Kubernetes" by default).
	ClusterID string
	// DomainSuffix is the cluster domain ("cluster.local").
	DomainSuffix string
}

// envoyNode is the xDS node: id router~<ip>~<pod>.<namespace>~<namespace>.svc.<domain>
// and the metadata istiod reads of a gateway proxy.
func (n Node) envoyNode() (*corev3.Node, error) {
	labels := map[string]any{}
	for k, v := range n.Labels {
		labels[k] = v
	}
	md, err := structpb.NewStruct(map[string]any{
		"NAME":            n.Name,
		"NAMESPACE":       n.Namespace,
		"LABELS":          labels,
		"CLUSTER_ID":      n.ClusterID,
		"INSTANCE_IPS":    n.IP,
		"WORKLOAD_NAME":   n.Name,
		"SERVICE_ACCOUNT": "istio-ingressgateway-service-account",
	})
	if err != nil {
		return nil, err
	}
	return &corev3.Node{
		Id:       fmt.Sprintf("router~%s~%s.%s~%s.svc.%s", n.IP, n.Name, n.Namespace, n.Namespace, n.DomainSuffix),
		Cluster:  n.Labels["app"] + "." + n.Namespace,
		Metadata: md,
	}, nil
}

// Config of the stand-in.
type Config struct {
	// XDSAddr is istiod's plaintext xDS address (host:port).
	XDSAddr string
	Node    Node
	// Secrets reads the Secrets that SDS names (the gateway's
	// credentialName and its -cacert), in Node.Namespace.
	Secrets client.Reader
	// ListenHost is the address listeners bind (127.0.0.1: loopback only).
	ListenHost string
	// Registerer takes the stand-in's metrics (nil: none registered).
	Registerer prometheus.Registerer
	Log        logr.Logger
}

// Gateway is the running stand-in.
type Gateway struct {
	cfg     Config
	ads     *adsClient
	metrics *metrics
	snap    atomic.Pointer[snapshot]
	res     atomic.Pointer[resources]
	fault   atomic.Pointer[Fault]
	rr      atomic.Uint64

	mu      sync.Mutex
	changed chan struct{} // closed and replaced at every install
	runCtx  context.Context
	creds   map[[2]string]*SecretCredentials
	authz   map[string]*authzConn
	upLinks *http.Transport
}

// Fault answers a request in place of the gateway (fault injection for
// tests): ok=false lets the request through. 404 stands for a route not yet
// programmed, 403 for ext-authz's cache not yet knowing a new Kyma
// (docs/architecture.md §4.8).
type Fault func(r *http.Request) (status int, ok bool)

// SetFault installs f (nil removes it).
func (g *Gateway) SetFault(f Fault) {
	if f == nil {
		g.fault.Store(nil)
		return
	}
	g.fault.Store(&f)
}

// New returns the stand-in; Run connects it to istiod, Serve serves its
// listeners.
func New(cfg Config) (*Gateway, error) {
	if cfg.ListenHost == "" {
		cfg.ListenHost = "127.0.0.1"
	}
	node, err := cfg.Node.envoyNode()
	if err != nil {
		return nil, err
	}
	m := newMetrics()
	if cfg.Registerer != nil {
		if err := m.register(cfg.Registerer); err != nil {
			return nil, err
		}
	}
	g := &Gateway{cfg: cfg, metrics: m, changed: make(chan struct{}), creds: map[[2]string]*SecretCredentials{}, authz: map[string]*authzConn{}}
	g.upLinks = &http.Transport{DialContext: dial, MaxIdleConnsPerHost: 16, IdleConnTimeout: time.Minute, DisableCompression: true}
	g.ads = &adsClient{addr: cfg.XDSAddr, node: node, log: cfg.Log.WithName("xds"), metrics: m,
		compile: compile, install: g.install, names: map[string][]string{}, nonce: map[string]string{},
		state: resources{byType: map[string]map[string]proto.Message{}, versions: map[string]string{}}}
	return g, nil
}

// Run keeps the xDS stream to istiod until ctx ends; the Secrets that SDS
// names are read as long.
func (g *Gateway) Run(ctx context.Context) error {
	g.mu.Lock()
	g.runCtx = ctx
	g.mu.Unlock()
	defer g.closeAuthz()
	return g.ads.run(ctx)
}

// install takes an accepted configuration.
func (g *Gateway) install(s *snapshot, r resources) {
	g.res.Store(&r)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, l := range s.listeners {
		for _, fc := range l.chains {
			g.credsLocked(fc.tls)
		}
	}
	g.snap.Store(s)
	close(g.changed)
	g.changed = make(chan struct{})
}

// Versions is the xDS version accepted per type (CDS, EDS, LDS, RDS).
func (g *Gateway) Versions() map[string]string {
	out := map[string]string{}
	if s := g.snap.Load(); s != nil {
		for t, v := range s.versions {
			out[shortType(t)] = v
		}
	}
	return out
}

// Resources are the accepted xDS resources by type (CDS, EDS, LDS, RDS),
// each list sorted by name.
func (g *Gateway) Resources() map[string][]proto.Message {
	out := map[string][]proto.Message{}
	if r := g.res.Load(); r != nil {
		for t, byName := range r.byType {
			for _, name := range sortedKeys(byName) {
				out[shortType(t)] = append(out[shortType(t)], byName[name])
			}
		}
	}
	return out
}

// Changed is closed at the next accepted xDS update.
func (g *Gateway) Changed() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.changed
}

// Route is the cluster that a request for host and path is routed to by
// the accepted configuration ("" when none): what a test waits for after a
// push.
func (g *Gateway) Route(host, path string) string {
	s := g.snap.Load()
	if s == nil {
		return ""
	}
	for _, l := range s.listeners {
		for _, fc := range l.chains {
			if rt := s.routeTable(fc.hcm); rt != nil {
				if r := rt.find(host, path); r != nil && r.cluster != "" {
					return r.cluster
				}
			}
		}
	}
	return ""
}

// Ports are the ports of the accepted listeners.
func (g *Gateway) Ports() []uint32 {
	var out []uint32
	if s := g.snap.Load(); s != nil {
		for _, l := range s.listeners {
			out = append(out, l.port)
		}
	}
	return out
}

// Serve serves the listeners of the accepted configuration, and those
// later updates add, until ctx ends; their sockets are closed then. It
// returns once the current listeners are bound; done is closed when they
// are closed again.
func (g *Gateway) Serve(ctx context.Context) (done <-chan struct{}, err error) {
	running := map[string]*servedListener{}
	stopAll := func() {
		for _, sl := range running {
			sl.stop()
		}
	}
	changed := g.Changed()
	if err := g.reconcile(running); err != nil {
		stopAll()
		return nil, err
	}
	d := make(chan struct{})
	go func() {
		defer close(d)
		defer stopAll()
		for {
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
			changed = g.Changed()
			if err := g.reconcile(running); err != nil {
				g.cfg.Log.Error(err, "listener not served")
			}
		}
	}()
	return d, nil
}

// reconcile serves the accepted listeners: new ones are bound, removed or
// moved ones closed.
func (g *Gateway) reconcile(running map[string]*servedListener) error {
	s := g.snap.Load()
	if s == nil {
		return nil
	}
	want := map[string]bool{}
	var errs []error
	for _, l := range s.listeners {
		want[l.name] = true
		if sl, ok := running[l.name]; ok && sl.port == l.port {
			continue
		}
		if sl, ok := running[l.name]; ok {
			sl.stop()
			delete(running, l.name)
		}
		sl, err := g.listen(l)
		if err != nil {
			errs = append(errs, fmt.Errorf("listener %s: %w", l.name, err))
			continue
		}
		running[l.name] = sl
	}
	for name, sl := range running {
		if !want[name] {
			sl.stop()
			delete(running, name)
		}
	}
	return errors.Join(errs...)
}

type servedListener struct {
	port uint32
	srv  *http.Server
}

func (s *servedListener) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
}

func (g *Gateway) listen(l *listener) (*servedListener, error) {
	ln, err := net.Listen("tcp", net.JoinHostPort(g.cfg.ListenHost, strconv.Itoa(int(l.port))))
	if err != nil {
		return nil, err
	}
	name := l.name
	srv := &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { g.serveHTTP(name, w, r) }),
		TLSConfig:         &tls.Config{MinVersion: tls.VersionTLS12, GetConfigForClient: func(h *tls.ClientHelloInfo) (*tls.Config, error) { return g.tlsFor(name, h.ServerName) }},
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		ErrorLog:          nil,
	}
	go func() { _ = srv.ServeTLS(ln, "", "") }()
	return &servedListener{port: l.port, srv: srv}, nil
}

// chain is the filter chain of listener name for the SNI serverName.
func (g *Gateway) chain(name, serverName string) (*snapshot, *filterChain) {
	s := g.snap.Load()
	if s == nil {
		return nil, nil
	}
	for _, l := range s.listeners {
		if l.name == name {
			return s, l.match(serverName)
		}
	}
	return s, nil
}

// match picks the filter chain for an SNI server name as Envoy's filter
// chain match does for server_names.
func (l *listener) match(serverName string) *filterChain {
	var best *filterChain
	bestLen := -1
	for _, fc := range l.chains {
		if len(fc.serverNames) == 0 {
			if bestLen < 0 {
				best, bestLen = fc, 0
			}
			continue
		}
		for _, n := range fc.serverNames {
			switch {
			case n == serverName:
				return fc
			case len(n) > 1 && n[0] == '*' && len(serverName) > len(n)-1 && serverName[len(serverName)-len(n)+1:] == n[1:]:
				if len(n) > bestLen {
					best, bestLen = fc, len(n)
				}
			}
		}
	}
	return best
}

func (g *Gateway) tlsFor(listenerName, serverName string) (*tls.Config, error) {
	_, fc := g.chain(listenerName, serverName)
	if fc == nil {
		g.metrics.connections.WithLabelValues("no_filter_chain").Inc()
		return nil, fmt.Errorf("no filter chain of listener %s matches server name %q", listenerName, serverName)
	}
	t := fc.tls
	g.mu.Lock()
	creds := g.credsLocked(t)
	g.mu.Unlock()
	if creds == nil {
		return nil, errors.New("gateway not running")
	}
	cert, pool, err := creds.Get()
	if err != nil {
		return nil, err
	}
	c := &tls.Config{
		Certificates: []tls.Certificate{*cert},
		MinVersion:   tls.VersionTLS12, // Envoy's server default for TLS_AUTO
		MaxVersion:   t.maxVersion,
		CipherSuites: t.cipherSuites,
		NextProtos:   t.alpn,
		ClientAuth:   tls.NoClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			g.metrics.handshakes.WithLabelValues(tls.VersionName(cs.Version), tls.CipherSuiteName(cs.CipherSuite)).Inc()
			return nil
		},
	}
	if t.minVersion != 0 {
		c.MinVersion = t.minVersion
	}
	if t.caSecret != "" {
		c.ClientCAs = pool
		c.ClientAuth = tls.VerifyClientCertIfGiven
		if t.requireClient {
			c.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return c, nil
}

// credsLocked is the (started) SecretCredentials of a chain's SDS names;
// nil before Run. The caller holds g.mu.
func (g *Gateway) credsLocked(t *downstreamTLS) *SecretCredentials {
	key := [2]string{t.certSecret, t.caSecret}
	if c, ok := g.creds[key]; ok {
		return c
	}
	if g.runCtx == nil {
		return nil
	}
	c := &SecretCredentials{Reader: g.cfg.Secrets, Server: g.secretKey(t.certSecret), ClientCA: g.secretKey(t.caSecret)}
	g.creds[key] = c
	go func() { _ = c.Run(g.runCtx) }()
	return c
}

// secretKey is the Secret an SDS name kubernetes://[<namespace>/]<name>
// stands for (istiod's credentials.ParseResourceName).
func (g *Gateway) secretKey(sds string) types.NamespacedName {
	name := sds[len("kubernetes://"):]
	for i := range name {
		if name[i] == '/' {
			return types.NamespacedName{Namespace: name[:i], Name: name[i+1:]}
		}
	}
	return types.NamespacedName{Namespace: g.cfg.Node.Namespace, Name: name}
}

// WaitServing waits until a listener is served with its credentials.
func (g *Gateway) WaitServing(ctx context.Context) error {
	for {
		changed := g.Changed()
		if s := g.snap.Load(); s != nil && len(s.listeners) > 0 {
			ready := true
			for _, l := range s.listeners {
				for _, fc := range l.chains {
					g.mu.Lock()
					c := g.credsLocked(fc.tls)
					g.mu.Unlock()
					if c == nil {
						ready = false
						continue
					}
					if _, _, err := c.Get(); err != nil {
						ready = false
					}
				}
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-changed:
		case <-time.After(100 * time.Millisecond): // credentials load on their own schedule
		}
	}
}
