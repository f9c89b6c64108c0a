package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/genproto/googleapis/rpc/code"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// rbacFilterName is the namespace of the RBAC filter's dynamic metadata.
const rbacFilterName = "envoy.filters.http.rbac"

// maxBufferedBody bounds the request body kept for retries (Envoy's
// default per-connection buffer limit, 1 MiB); a larger body is answered
// 413.
const maxBufferedBody = 1 << 20

func (g *Gateway) serveHTTP(listenerName string, w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil {
		http.Error(w, "TLS required", http.StatusForbidden)
		return
	}
	s, fc := g.chain(listenerName, r.TLS.ServerName)
	if fc == nil {
		g.metrics.requests.WithLabelValues("no_filter_chain").Inc()
		http.Error(w, "no filter chain", http.StatusNotFound)
		return
	}
	var leaf *x509.Certificate
	if len(r.TLS.PeerCertificates) > 0 {
		leaf = r.TLS.PeerCertificates[0]
	}
	if f := g.fault.Load(); f != nil {
		if status, ok := (*f)(r); ok {
			if status == http.StatusForbidden {
				w.Header().Set(contract.HeaderDenyReason, string(contract.ReasonUnknownRuntime))
			}
			http.Error(w, "injected fault", status)
			return
		}
	}
	if r.Header.Get("Upgrade") != "" {
		// upgrade_configs (WebSocket) are accepted but not implemented.
		g.metrics.requests.WithLabelValues("upgrade_refused").Inc()
		http.Error(w, "upgrades are not implemented by the gateway stand-in", http.StatusNotImplemented)
		return
	}
	h := fc.hcm
	if h.normalizePath || h.mergeSlashes {
		r.URL.Path = normalizePath(r.URL.Path, h.normalizePath, h.mergeSlashes)
		r.URL.RawPath = ""
	}
	setXFCC(r, h.fcc, h.details, leaf, r.TLS.PeerCertificates, g.localCert(fc))

	metadata := map[string]map[string]string{}
	for _, f := range h.filters {
		switch {
		case f.rbac != nil:
			req := &rbacRequest{path: r.URL.Path, headers: requestHeaders(r), destPort: localPort(r), peer: leaf}
			if id := f.rbac.shadow.matched(req); id != "" {
				md := metadata[rbacFilterName]
				if md == nil {
					md = map[string]string{}
					metadata[rbacFilterName] = md
				}
				md[f.rbac.prefix+"shadow_effective_policy_id"] = id
				md[f.rbac.prefix+"shadow_engine_result"] = "allowed"
			}
		case f.authz != nil:
			if !g.extAuthz(s, f.authz, metadata, w, r, leaf) {
				return
			}
		default: // the router
			g.route(s, h, w, r)
			return
		}
	}
}

// extAuthz runs the ext_authz filter; false when it answered the request.
func (g *Gateway) extAuthz(s *snapshot, a *extAuthzFilter, md map[string]map[string]string, w http.ResponseWriter, r *http.Request, leaf *x509.Certificate) bool {
	if a.enabled != nil {
		if v, ok := md[a.enabled.filter][a.enabled.key]; !ok || !a.enabled.value.match(v) {
			g.metrics.authz.WithLabelValues("skipped").Inc()
			return true
		}
	}
	resp, err := g.check(s, a, r, leaf)
	if err != nil {
		if a.failureModeOpen {
			g.metrics.authz.WithLabelValues("error_allowed").Inc()
			g.cfg.Log.Error(err, "ext_authz check failed; allowing (failure_mode_allow)", "path", r.URL.Path)
			return true
		}
		g.metrics.authz.WithLabelValues("error").Inc()
		g.cfg.Log.Error(err, "ext_authz check failed; answering status_on_error", "path", r.URL.Path, "status", a.statusOnError)
		w.WriteHeader(a.statusOnError)
		return false
	}
	if code.Code(resp.GetStatus().GetCode()) != code.Code_OK {
		g.metrics.authz.WithLabelValues("denied").Inc()
		writeDenied(w, resp.GetDeniedResponse())
		return false
	}
	g.metrics.authz.WithLabelValues("allowed").Inc()
	applyOK(r.Header, resp.GetOkResponse())
	return true
}

type authzConn struct {
	conn  *grpc.ClientConn
	authz authv3.AuthorizationClient
}

func (g *Gateway) check(s *snapshot, a *extAuthzFilter, r *http.Request, leaf *x509.Certificate) (*authv3.CheckResponse, error) {
	addr, err := g.endpoint(s, a.cluster)
	if err != nil {
		return nil, err
	}
	g.mu.Lock()
	c, ok := g.authz[addr]
	if !ok {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			g.mu.Unlock()
			return nil, err
		}
		c = &authzConn{conn: conn, authz: authv3.NewAuthorizationClient(conn)}
		g.authz[addr] = c
	}
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(r.Context(), a.timeout)
	defer cancel()
	return c.authz.Check(ctx, CheckRequest(r, leaf, a.includePeerCert))
}

func (g *Gateway) closeAuthz() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for addr, c := range g.authz {
		_ = c.conn.Close()
		delete(g.authz, addr)
	}
}

// endpoint picks the next endpoint of a cluster (round robin).
func (g *Gateway) endpoint(s *snapshot, clusterName string) (string, error) {
	c, ok := s.clusters[clusterName]
	if !ok {
		return "", fmt.Errorf("cluster %s not found", clusterName)
	}
	if len(c.endpoints) == 0 {
		return "", fmt.Errorf("cluster %s has no healthy endpoint", clusterName)
	}
	return c.endpoints[g.rr.Add(1)%uint64(len(c.endpoints))], nil
}

func (s *snapshot) routeTable(h *httpConnManager) *routeTable {
	if h.inline != nil {
		return h.inline
	}
	return s.routes[h.rds]
}

// find is the route of the first virtual host whose domains match host
// (exact, then the longest suffix wildcard, then the longest prefix
// wildcard, then "*") and its first route matching path.
func (rt *routeTable) find(host, path string) *route {
	vh := rt.virtualHost(strings.ToLower(host))
	if vh == nil {
		return nil
	}
	for _, r := range vh.routes {
		if r.match.matches(path) {
			return r
		}
	}
	return nil
}

func (rt *routeTable) vhostOf(host string) *virtualHost { return rt.virtualHost(strings.ToLower(host)) }

func (rt *routeTable) virtualHost(host string) *virtualHost {
	var suffix, prefix, star *virtualHost
	suffixLen, prefixLen := -1, -1
	for _, vh := range rt.vhosts {
		for _, d := range vh.domains {
			d = strings.ToLower(d)
			switch {
			case d == host:
				return vh
			case d == "*":
				if star == nil {
					star = vh
				}
			case strings.HasPrefix(d, "*") && strings.HasSuffix(host, d[1:]) && len(host) > len(d)-1:
				if len(d) > suffixLen {
					suffix, suffixLen = vh, len(d)
				}
			case strings.HasSuffix(d, "*") && strings.HasPrefix(host, d[:len(d)-1]) && len(host) > len(d)-1:
				if len(d) > prefixLen {
					prefix, prefixLen = vh, len(d)
				}
			}
		}
	}
	switch {
	case suffix != nil:
		return suffix
	case prefix != nil:
		return prefix
	}
	return star
}

func (m pathMatch) matches(path string) bool {
	p := path
	fold := func(s string) string {
		if m.caseSensitive {
			return s
		}
		return strings.ToLower(s)
	}
	switch {
	case m.regex != nil:
		return m.regex.MatchString(p)
	case m.path != "":
		return fold(p) == fold(m.path)
	default:
		return strings.HasPrefix(fold(p), fold(m.prefix))
	}
}

// route is the router filter.
func (g *Gateway) route(s *snapshot, h *httpConnManager, w http.ResponseWriter, r *http.Request) {
	rt := s.routeTable(h)
	var vh *virtualHost
	var rte *route
	if rt != nil {
		if vh = rt.vhostOf(r.Host); vh != nil {
			for _, c := range vh.routes {
				if c.match.matches(r.URL.Path) {
					rte = c
					break
				}
			}
		}
	}
	if rte == nil {
		g.metrics.requests.WithLabelValues("no_route").Inc()
		g.cfg.Log.Info("no route", "host", r.Host, "path", r.URL.Path)
		w.WriteHeader(http.StatusNotFound) // Envoy: 404 NR
		return
	}
	if d := rte.direct; d != nil {
		g.metrics.requests.WithLabelValues("direct_response").Inc()
		w.WriteHeader(d.status)
		_, _ = io.WriteString(w, d.body)
		return
	}
	g.forward(s, vh, rte, w, r)
}

// forward sends r to the route's cluster with its timeout and retries.
func (g *Gateway) forward(s *snapshot, vh *virtualHost, rte *route, w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBufferedBody+1))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if len(body) > maxBufferedBody {
		g.metrics.requests.WithLabelValues("too_large").Inc()
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		return
	}
	ctx := r.Context()
	if rte.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, rte.timeout)
		defer cancel()
	}
	attempts := 1
	if rte.retry != nil {
		attempts += rte.retry.retries
	}
	var lastErr error
	var resp *http.Response
	for attempt := 1; attempt <= attempts; attempt++ {
		if attempt > 1 {
			// Envoy's default back-off: fully jittered, base 25 ms.
			base := 25 * time.Millisecond << (attempt - 2)
			select {
			case <-ctx.Done():
			case <-time.After(min(rand.N(base)+time.Millisecond, 250*time.Millisecond)):
			}
		}
		resp, lastErr = g.attempt(ctx, s, vh, rte, r, body, attempt)
		if !retriable(rte.retry, resp, lastErr) || attempt == attempts || ctx.Err() != nil {
			break
		}
		g.metrics.requests.WithLabelValues("retry").Inc()
		if resp != nil {
			_ = resp.Body.Close()
			resp = nil
		}
	}
	if resp == nil {
		status := http.StatusServiceUnavailable // Envoy: 503 UF / UH / NC
		if errors.Is(lastErr, context.DeadlineExceeded) {
			status = http.StatusGatewayTimeout // Envoy: 504 UT
		}
		g.metrics.requests.WithLabelValues("upstream_failure").Inc()
		g.cfg.Log.Info("upstream failed", "cluster", rte.cluster, "error", fmt.Sprint(lastErr))
		w.WriteHeader(status)
		return
	}
	defer func() { _ = resp.Body.Close() }()
	g.metrics.requests.WithLabelValues("routed").Inc()
	for k, vs := range resp.Header {
		if hopByHop(k) {
			continue
		}
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (g *Gateway) attempt(ctx context.Context, s *snapshot, vh *virtualHost, rte *route, r *http.Request, body []byte, attempt int) (*http.Response, error) {
	addr, err := g.endpoint(s, rte.cluster)
	if err != nil {
		return nil, err
	}
	ctx = context.WithValue(ctx, connectTimeoutKey{}, s.clusters[rte.cluster].connectTimeout)
	cancel := context.CancelFunc(func() {})
	if rte.retry != nil && rte.retry.perTryTimeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, rte.retry.perTryTimeout)
	}
	out, err := http.NewRequestWithContext(ctx, r.Method, (&url.URL{Scheme: "http", Host: addr, Path: r.URL.Path, RawQuery: r.URL.RawQuery}).String(), bytes.NewReader(body))
	if err != nil {
		cancel()
		return nil, err
	}
	for k, vs := range r.Header {
		if !hopByHop(k) {
			out.Header[k] = slices.Clone(vs)
		}
	}
	out.Host = r.Host
	out.Header.Set("X-Forwarded-Proto", "https")
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		out.Header.Set("X-Forwarded-For", host) // use_remote_address: the peer's address
	}
	if out.Header.Get("X-Request-Id") == "" {
		out.Header.Set("X-Request-Id", strconv.FormatUint(rand.Uint64(), 36))
	}
	if vh.includeAttemptCount {
		out.Header.Set("X-Envoy-Attempt-Count", strconv.Itoa(attempt))
	}
	resp, err := g.upLinks.RoundTrip(out)
	if err != nil {
		cancel()
		return nil, err
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}
	return resp, nil
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}

type connectTimeoutKey struct{}

// dial connects to an endpoint within its cluster's connect_timeout; a
// failure is a connect failure (retry_on connect-failure).
func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	timeout, _ := ctx.Value(connectTimeoutKey{}).(time.Duration)
	d := &net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, &connectError{err}
	}
	return conn, nil
}

type connectError struct{ err error }

func (e *connectError) Error() string { return "connect failure: " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// retriable reports whether an attempt's outcome is one the policy retries.
func retriable(p *retryPolicy, resp *http.Response, err error) bool {
	if p == nil {
		return false
	}
	on := func(c string) bool { return slices.Contains(p.on, c) }
	if err != nil {
		var ce *connectError
		if errors.As(err, &ce) {
			return on("connect-failure") || on("5xx") || on("gateway-error")
		}
		if errors.Is(err, context.DeadlineExceeded) {
			return false // the route timeout, or a per-try timeout: Envoy retries those only on "5xx"/"gateway-error" per try
		}
		return on("reset") || on("5xx") || on("gateway-error")
	}
	code := resp.StatusCode
	switch {
	case on("retriable-status-codes") && slices.Contains(p.statusCodes, code):
		return true
	case on("5xx") && code >= 500:
		return true
	case on("gateway-error") && (code == 502 || code == 503 || code == 504):
		return true
	}
	return false
}

var hopHeaders = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Transfer-Encoding", "Te", "Trailer", "Upgrade"}

func hopByHop(k string) bool { return slices.Contains(hopHeaders, http.CanonicalHeaderKey(k)) }

// normalizePath removes dot segments (RFC 3986 §5.2.4) and, with merge,
// repeated slashes, as Envoy's normalize_path and merge_slashes do.
func normalizePath(p string, dots, merge bool) string {
	if merge {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
	}
	if !dots {
		return p
	}
	var out []string
	segs := strings.Split(p, "/")
	for i, s := range segs {
		switch s {
		case ".":
			if i == len(segs)-1 {
				out = append(out, "")
			}
		case "..":
			if len(out) > 1 {
				out = out[:len(out)-1]
			}
			if i == len(segs)-1 {
				out = append(out, "")
			}
		default:
			out = append(out, s)
		}
	}
	res := strings.Join(out, "/")
	if !strings.HasPrefix(res, "/") {
		res = "/" + res
	}
	return res
}

// setXFCC applies forward_client_cert_details and
// set_current_client_cert_details to r's x-forwarded-client-cert header.
func setXFCC(r *http.Request, mode fccMode, d xfccDetails, leaf *x509.Certificate, chain []*x509.Certificate, local *x509.Certificate) {
	mtls := leaf != nil
	switch mode {
	case fccSanitize:
		r.Header.Del(contract.HeaderXFCC)
	case fccForwardOnly:
		if !mtls {
			r.Header.Del(contract.HeaderXFCC)
		}
	case fccAlwaysForwardOnly:
	case fccAppendForward, fccSanitizeSet:
		if !mtls {
			r.Header.Del(contract.HeaderXFCC)
			return
		}
		el := XFCCElement(leaf, chain, local, d)
		prev := strings.Join(r.Header.Values(contract.HeaderXFCC), ",")
		r.Header.Del(contract.HeaderXFCC)
		if mode == fccAppendForward && prev != "" {
			el = prev + "," + el
		}
		r.Header.Set(contract.HeaderXFCC, el)
	}
}

func (g *Gateway) localCert(fc *filterChain) *x509.Certificate {
	g.mu.Lock()
	c := g.credsLocked(fc.tls)
	g.mu.Unlock()
	if c == nil {
		return nil
	}
	cert, _, err := c.Get()
	if err != nil || cert == nil || cert.Leaf == nil {
		return nil
	}
	return cert.Leaf
}

// XFCCElement renders one XFCC element as Envoy does: By (the local URI
// SAN), Hash (always), then Cert, Chain, Subject, URI and DNS as details
// asks; Envoy quotes Cert, Chain and Subject.
func XFCCElement(leaf *x509.Certificate, chain []*x509.Certificate, local *x509.Certificate, d xfccDetails) string {
	var parts []string
	if local != nil && len(local.URIs) > 0 {
		parts = append(parts, "By="+local.URIs[0].String())
	}
	sum := sha256.Sum256(leaf.Raw)
	parts = append(parts, "Hash="+hex.EncodeToString(sum[:]))
	if d.cert {
		parts = append(parts, `Cert="`+xfcc.EncodeCert(pemOf(leaf))+`"`)
	}
	if d.chain {
		var b []byte
		for _, c := range chain {
			b = append(b, pemOf(c)...)
		}
		parts = append(parts, `Chain="`+xfcc.EncodeCert(b)+`"`)
	}
	if d.subject {
		parts = append(parts, `Subject="`+strings.ReplaceAll(leaf.Subject.String(), `"`, `\"`)+`"`)
	}
	if d.uri {
		for _, u := range leaf.URIs {
			parts = append(parts, "URI="+u.String())
		}
	}
	if d.dns {
		for _, n := range leaf.DNSNames {
			parts = append(parts, "DNS="+n)
		}
	}
	return strings.Join(parts, ";")
}

// XFCC is the element Istio's SANITIZE_SET gateway sets: Hash, Cert,
// Subject, URI, DNS.
func XFCC(leaf *x509.Certificate) string {
	return XFCCElement(leaf, nil, nil, xfccDetails{subject: true, cert: true, uri: true, dns: true})
}

func requestHeaders(r *http.Request) map[string]string {
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
	return headers
}

// CheckRequest builds the request Envoy's ext_authz filter sends for r,
// whose verified client certificate is leaf (nil: none); withCert is
// include_peer_certificate.
func CheckRequest(r *http.Request, leaf *x509.Certificate, withCert bool) *authv3.CheckRequest {
	src := &authv3.AttributeContext_Peer{Address: socketAddress(r.RemoteAddr)}
	if leaf != nil {
		src.Principal = principalName(leaf)
		if withCert {
			src.Certificate = xfcc.EncodeCert(pemOf(leaf))
		}
	}
	return &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
		Source:      src,
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(localAddr(r))},
		Request: &authv3.AttributeContext_Request{
			Time: timestamppb.Now(),
			Http: &authv3.AttributeContext_HttpRequest{
				Id:       strconv.FormatInt(time.Now().UnixNano(), 36),
				Method:   r.Method,
				Headers:  requestHeaders(r),
				Path:     r.URL.RequestURI(),
				Host:     r.Host,
				Scheme:   "https",
				Protocol: r.Proto,
				Size:     r.ContentLength,
			},
		},
	}}
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

// principalName is what Envoy reports as the peer principal: the first URI
// SAN, else the first DNS SAN, else the subject.
func principalName(c *x509.Certificate) string {
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

func localPort(r *http.Request) uint32 {
	_, port, err := net.SplitHostPort(localAddr(r))
	if err != nil {
		return 0
	}
	p, _ := strconv.ParseUint(port, 10, 32)
	return uint32(p)
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
