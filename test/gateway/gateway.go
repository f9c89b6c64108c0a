// Package gateway stands in for the Istio ingress gateway (Envoy) in local
// runs and tests, because Envoy cannot run on machines without containers.
// It does what our manifests configure the real gateway to do, and nothing
// more:
//
//   - TLS with a required, verified client certificate (Gateway tls.mode
//     MUTUAL);
//   - forwardClientCertDetails SANITIZE_SET: any incoming
//     x-forwarded-client-cert header is dropped and replaced by one element
//     in Envoy's format (Hash, Cert, Subject, URI, DNS);
//   - the ext_authz HTTP filter with a gRPC service, fail closed: a
//     CheckRequest filled as Envoy fills it (source and destination peers,
//     request.http with lowercase headers including pseudo-headers, and the
//     URL-encoded PEM peer certificate), a denied CheckResponse is answered
//     with its status, headers and body (403 when it sets none), an OK
//     response's header mutations are applied before routing, and a failed
//     call answers 403 as Envoy's default status_on_error does;
//   - routing by the VirtualServices in the KCP API server that name this
//     gateway: host match, then the first HTTP route whose URI prefix
//     matches, to its destination, with in-cluster service hosts mapped to
//     local addresses.
//
// It does not implement retries, timeouts per route, rewrites, weights or
// anything else of Envoy's routing.
package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// Config of the stand-in.
type Config struct {
	// ServerCert is the gateway's serving certificate; ClientCAs verify the
	// SKR client certificates.
	ServerCert tls.Certificate
	ClientCAs  *x509.CertPool
	// Credentials, when set, replace ServerCert and ClientCAs and are asked
	// at every handshake (a gateway whose Secrets rotate, SecretCredentials).
	Credentials func() (*tls.Certificate, *x509.CertPool, error)
	// AuthzAddr is ext-authz's gRPC address (host:port).
	AuthzAddr string
	// AuthzTimeout bounds each Check call (the provider's timeout).
	AuthzTimeout time.Duration
	// Gateway is the Istio Gateway this stands in for, "<namespace>/<name>":
	// only VirtualServices that list it route through here.
	Gateway string
	// VirtualServices reads VirtualService objects, normally from a cache.
	VirtualServices client.Reader
	// Upstreams maps a destination "<host>:<port>" of a VirtualService
	// (e.g. "listener.kcp-system.svc.cluster.local:8082") to a local address.
	Upstreams map[string]string
	Log       logr.Logger
}

// Gateway is the running stand-in.
type Gateway struct {
	cfg   Config
	conn  *grpc.ClientConn
	authz authv3.AuthorizationClient
	fault atomic.Pointer[Fault]
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

// New connects to ext-authz (lazily, as Envoy's cluster does) and returns the
// stand-in.
func New(cfg Config) (*Gateway, error) {
	if cfg.AuthzTimeout == 0 {
		cfg.AuthzTimeout = time.Second
	}
	conn, err := grpc.NewClient(cfg.AuthzAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, fmt.Errorf("ext-authz client: %w", err)
	}
	return &Gateway{cfg: cfg, conn: conn, authz: authv3.NewAuthorizationClient(conn)}, nil
}

// TLSConfig is the MUTUAL server TLS configuration.
func (g *Gateway) TLSConfig() *tls.Config {
	if creds := g.cfg.Credentials; creds != nil {
		return &tls.Config{
			MinVersion: tls.VersionTLS12,
			NextProtos: []string{"h2", "http/1.1"},
			GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
				cert, pool, err := creds()
				if err != nil {
					return nil, err
				}
				return &tls.Config{
					Certificates: []tls.Certificate{*cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
					MinVersion: tls.VersionTLS12, NextProtos: []string{"h2", "http/1.1"},
				}, nil
			},
		}
	}
	return &tls.Config{
		Certificates: []tls.Certificate{g.cfg.ServerCert},
		ClientCAs:    g.cfg.ClientCAs,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS12,
		NextProtos:   []string{"h2", "http/1.1"},
	}
}

// Serve answers HTTPS on l until ctx is done; the listener is closed then.
func (g *Gateway) Serve(ctx context.Context, l net.Listener) error {
	srv := &http.Server{
		Handler:           g,
		TLSConfig:         g.TLSConfig(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(l, "", "") }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return srv.Shutdown(sctx)
	}
}

// Close closes the connection to ext-authz. Serve may be called again
// (a gateway restart) until then.
func (g *Gateway) Close() error { return g.conn.Close() }

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		// Cannot happen with RequireAndVerifyClientCert; fail closed anyway.
		http.Error(w, "client certificate required", http.StatusForbidden)
		return
	}
	leaf := r.TLS.PeerCertificates[0]
	if f := g.fault.Load(); f != nil {
		if status, ok := (*f)(r); ok {
			if status == http.StatusForbidden {
				w.Header().Set(contract.HeaderDenyReason, string(contract.ReasonUnknownRuntime))
			}
			http.Error(w, "injected fault", status)
			return
		}
	}

	// SANITIZE_SET: whatever the client sent is replaced.
	r.Header.Del(contract.HeaderXFCC)
	r.Header.Set(contract.HeaderXFCC, XFCC(leaf))

	resp, err := g.check(r, leaf)
	if err != nil {
		g.cfg.Log.Error(err, "ext_authz check failed; denying (fail closed)", "path", r.URL.Path)
		w.WriteHeader(http.StatusForbidden)
		return
	}
	if code.Code(resp.GetStatus().GetCode()) != code.Code_OK {
		writeDenied(w, resp.GetDeniedResponse())
		return
	}
	applyOK(r.Header, resp.GetOkResponse())
	g.route(w, r)
}

func (g *Gateway) check(r *http.Request, leaf *x509.Certificate) (*authv3.CheckResponse, error) {
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.AuthzTimeout)
	defer cancel()
	return g.authz.Check(ctx, CheckRequest(r, leaf))
}

// CheckRequest builds the request Envoy's ext_authz filter sends for r,
// whose verified client certificate is leaf.
func CheckRequest(r *http.Request, leaf *x509.Certificate) *authv3.CheckRequest {
	headers := map[string]string{
		":authority": r.Host,
		":method":    r.Method,
		":path":      r.URL.RequestURI(),
		":scheme":    "https",
	}
	for k, vs := range r.Header {
		// Envoy joins repeated headers with commas; names are lowercase.
		headers[strings.ToLower(k)] = strings.Join(vs, ",")
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source: &authv3.AttributeContext_Peer{
			Address:     socketAddress(r.RemoteAddr),
			Principal:   principal(leaf),
			Certificate: xfcc.EncodeCert(pemOf(leaf)),
		},
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(localAddr(r))},
		Request: &authv3.AttributeContext_Request{
			Time: timestamppb.Now(),
			Http: &authv3.AttributeContext_HttpRequest{
				Id:       strconv.FormatInt(time.Now().UnixNano(), 36),
				Method:   r.Method,
				Headers:  headers,
				Path:     r.URL.RequestURI(),
				Host:     r.Host,
				Scheme:   "https",
				Protocol: r.Proto,
				Size:     r.ContentLength,
			},
		},
	}}
}

// XFCC renders the certificate as the single element Envoy sets with
// SANITIZE_SET and set_current_client_cert_details {cert, subject, uri, dns}:
// Hash=<sha256 hex>;Cert="<url-encoded PEM>";Subject="<RFC 2253>";URI=...;DNS=...
// Envoy quotes only Cert, Chain and Subject.
func XFCC(leaf *x509.Certificate) string {
	sum := sha256.Sum256(leaf.Raw)
	var b strings.Builder
	b.WriteString("Hash=" + hex.EncodeToString(sum[:]))
	b.WriteString(`;Cert="` + xfcc.EncodeCert(pemOf(leaf)) + `"`)
	b.WriteString(`;Subject="` + strings.ReplaceAll(leaf.Subject.String(), `"`, `\"`) + `"`)
	for _, u := range leaf.URIs {
		b.WriteString(";URI=" + u.String())
	}
	for _, d := range leaf.DNSNames {
		b.WriteString(";DNS=" + d)
	}
	return b.String()
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// principal is what Envoy reports as the peer principal: the first URI SAN,
// else the first DNS SAN, else the subject.
func principal(c *x509.Certificate) string {
	switch {
	case len(c.URIs) > 0:
		return c.URIs[0].String()
	case len(c.DNSNames) > 0:
		return c.DNSNames[0]
	default:
		return c.Subject.String()
	}
}

func localAddr(r *http.Request) string {
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		return a.String()
	}
	return ""
}

func socketAddress(hostport string) *corev3.Address {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return nil
	}
	p, _ := strconv.ParseUint(port, 10, 32)
	return &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
		Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(p)},
	}}}
}

func writeDenied(w http.ResponseWriter, d *authv3.DeniedHttpResponse) {
	for _, h := range d.GetHeaders() {
		w.Header().Set(h.GetHeader().GetKey(), h.GetHeader().GetValue())
	}
	status := int(d.GetStatus().GetCode())
	if status == 0 {
		status = http.StatusForbidden
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(d.GetBody()))
}

// applyOK applies an OK response's header mutations to the upstream request.
func applyOK(h http.Header, ok *authv3.OkHttpResponse) {
	for _, name := range ok.GetHeadersToRemove() {
		h.Del(name)
	}
	for _, hv := range ok.GetHeaders() {
		k, v := hv.GetHeader().GetKey(), hv.GetHeader().GetValue()
		switch hv.GetAppendAction() {
		case corev3.HeaderValueOption_APPEND_IF_EXISTS_OR_ADD:
			h.Add(k, v)
		case corev3.HeaderValueOption_ADD_IF_ABSENT:
			if h.Get(k) == "" {
				h.Set(k, v)
			}
		default: // OVERWRITE_IF_EXISTS_OR_ADD, OVERWRITE_IF_EXISTS
			h.Set(k, v)
		}
	}
}

// route forwards r by the VirtualServices that name this gateway.
func (g *Gateway) route(w http.ResponseWriter, r *http.Request) {
	target, err := g.destination(r)
	if err != nil {
		g.cfg.Log.Info("no route", "host", r.Host, "path", r.URL.Path, "reason", err.Error())
		http.Error(w, "no route", http.StatusNotFound) // Envoy: 404 NR
		return
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: target})
			pr.Out.Host = r.Host
		},
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			g.cfg.Log.Info("upstream unreachable", "upstream", target, "error", err.Error())
			http.Error(w, "upstream connect error", http.StatusServiceUnavailable) // Envoy: 503 UF
		},
	}
	proxy.ServeHTTP(w, r)
}

func (g *Gateway) destination(r *http.Request) (string, error) {
	var list istionetworkingv1.VirtualServiceList
	if err := g.cfg.VirtualServices.List(r.Context(), &list); err != nil {
		return "", err
	}
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	for _, vs := range list.Items {
		if !contains(vs.Spec.Gateways, g.cfg.Gateway, vs.Namespace) || !hostMatches(vs.Spec.Hosts, host) {
			continue
		}
		for _, route := range vs.Spec.Http {
			if !prefixMatches(route, r.URL.Path) || len(route.Route) == 0 {
				continue
			}
			d := route.Route[0].GetDestination()
			key := fmt.Sprintf("%s:%d", d.GetHost(), d.GetPort().GetNumber())
			if local, ok := g.cfg.Upstreams[key]; ok {
				return local, nil
			}
			return "", fmt.Errorf("destination %s has no local address", key)
		}
	}
	return "", fmt.Errorf("no VirtualService of gateway %s matches", g.cfg.Gateway)
}

func contains(gateways []string, want, vsNamespace string) bool {
	for _, gw := range gateways {
		if !strings.Contains(gw, "/") {
			gw = vsNamespace + "/" + gw // Istio: a bare name is in the VirtualService's namespace
		}
		if gw == want {
			return true
		}
	}
	return false
}

func hostMatches(hosts []string, host string) bool {
	for _, h := range hosts {
		if h == "*" || strings.EqualFold(h, host) ||
			(strings.HasPrefix(h, "*.") && strings.HasSuffix(strings.ToLower(host), strings.ToLower(h[1:]))) {
			return true
		}
	}
	return false
}

// prefixMatches reports whether an HTTP route's match list accepts path;
// only URI prefix matches are supported (what vs-controller writes). A route
// without matches accepts everything, as in Istio.
func prefixMatches(route *istioapinetworking.HTTPRoute, path string) bool {
	if len(route.Match) == 0 {
		return true
	}
	for _, m := range route.Match {
		if p := m.GetUri().GetPrefix(); p != "" && strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
