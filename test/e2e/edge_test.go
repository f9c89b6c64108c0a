package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// What decides security at the edge, through the real gateway: upstream
// Envoy configured by istiod (pilot-agent, test/localenv). Envoy's
// behaviour is read from Envoy (its answers and its admin API's
// statistics), ext-authz's view from its decision log (every Check, with
// the runtime and the path it was asked about), routing from what the
// operator received. Each probe has its own runtime (a Kyma and a client
// certificate of its own), so background traffic (heartbeats, other
// events) never counts for a probe.
var _ = Describe("Edge (real Envoy)", Ordered, ContinueOnFailure, Label("edge"), func() {
	var (
		n  sample
		is e2e.IstioControls
	)

	BeforeAll(func(ctx SpecContext) {
		ie, ok := env.(e2e.IstioEnvironment)
		if !ok {
			Fail("the edge specs read the gateway's Envoy admin API (the local environment)")
		}
		is = ie.Istio()
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	stats := func(ctx context.Context, filter string) envoy.Stats {
		GinkgoHelper()
		s, err := is.GatewayAdmin().Stats(ctx, filter)
		Expect(err).NotTo(HaveOccurred())
		return s
	}

	// runtime creates a Kyma for a new runtime id and returns a client
	// certificate of it, once ext-authz allows it.
	runtime := func(ctx context.Context, id string) *tls.Certificate {
		GinkgoHelper()
		domain := id + ".edge.example.com"
		kyma := extauthz.Kyma(n.KymaNamespace, id, domain, map[string]string{contract.LabelRuntimeID: id})
		Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, kyma)).To(Succeed()) })
		c, err := env.IssueClientCert(pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})
		Expect(err).NotTo(HaveOccurred())
		// ext-authz's cache knows the Kyma once a Check of it is allowed.
		Eventually(func(ctx context.Context) int {
			status, _ := postRaw(ctx, &c, contract.EventPath(n.Manager), "edge-warmup", nil, false)
			return status
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(http.StatusOK))
		return &c
	}

	// checks are ext-authz's decision log lines about runtime id: the
	// path and result of every Check it was asked for that runtime.
	checks := func(id string) []decision {
		GinkgoHelper()
		return decisions(is.ExtAuthzLog(), id)
	}

	It("fails the handshake of a client without a certificate; nothing reaches ext-authz", func(ctx SpecContext) {
		before := stats(ctx, `ssl\.(fail_verify_no_cert|connection_error)$`)
		Expect(handshakeRefusal(ctx, nil)).To(MatchError(ContainSubstring("certificate required")))
		Eventually(func(ctx context.Context) uint64 {
			return stats(ctx, `ssl\.fail_verify_no_cert$`).Sum("ssl.fail_verify_no_cert")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeNumerically(">", before.Sum("ssl.fail_verify_no_cert")))
	})

	It("fails the handshake of a certificate from another CA (for the sample runtime's CN and domain); nothing reaches ext-authz", func(ctx SpecContext) {
		other, err := pki.NewCA("not-the-runtime-ca")
		Expect(err).NotTo(HaveOccurred())
		leaf, err := other.Issue(pki.LeafOptions{CommonName: n.RuntimeID, DNSNames: []string{n.SKRDomain}})
		Expect(err).NotTo(HaveOccurred())
		cert, err := leaf.TLS()
		Expect(err).NotTo(HaveOccurred())
		before := stats(ctx, `ssl\.fail_verify_error$`).Sum("ssl.fail_verify_error")
		Expect(handshakeRefusal(ctx, &cert)).To(MatchError(ContainSubstring("unknown certificate authority")))
		Eventually(func(ctx context.Context) uint64 {
			return stats(ctx, `ssl\.fail_verify_error$`).Sum("ssl.fail_verify_error")
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(BeNumerically(">", before))
	})

	It("replaces a client-sent XFCC header: ext-authz sees one element, the verified certificate's", func(ctx SpecContext) {
		cert := runtime(ctx, "edge-xfcc")
		forged := fmt.Sprintf(`Hash=00;Cert="x";Subject="CN=%s";DNS=%s`, n.RuntimeID, n.SKRDomain)
		status, body := postRaw(ctx, cert, contract.EventPath(n.Manager), "edge-xfcc", map[string]string{contract.HeaderXFCC: forged}, false)
		// Had Envoy appended to the forged element, ext-authz would have
		// refused two elements (malformed-xfcc); had it forwarded it, the
		// Check would be the sample runtime's.
		Expect(status).To(Equal(http.StatusOK), body)
		Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, "edge-xfcc", time.Time{}) }).
			Should(ContainElement(HaveField("RuntimeID", "edge-xfcc")))
		Expect(checks("edge-xfcc")).NotTo(ContainElement(HaveField("Result", "deny")))
	})

	// The path normalisation istiod configures on the gateway's HTTP
	// connection manager (Istio's default, pathNormalization DEFAULT):
	// normalize_path (RFC 3986: percent-decoding of unreserved characters,
	// dot-segments removed), merge_slashes off, and
	// path_with_escaped_slashes_action KEEP_UNCHANGED. Envoy applies it
	// before any filter: RBAC, ext_authz and the router all see the one
	// normalised path.
	DescribeTable("normalises a path once, before ext-authz and routing: both see the same path",
		func(ctx SpecContext, id, raw string, wantStatus int, wantAuthzPath string, routed bool) {
			cert := runtime(ctx, id)
			since, seen := time.Now(), len(checks(id)) // the log's times are in seconds: count lines instead
			status, body := postRaw(ctx, cert, raw, id, nil, false)
			Expect(status).To(Equal(wantStatus), "%s: %s", raw, body)
			var paths []string
			for _, d := range checks(id)[seen:] {
				paths = append(paths, d.Path)
			}
			if wantAuthzPath == "" {
				Expect(paths).To(BeEmpty(), "Envoy answered %s itself, before ext_authz", raw)
			} else {
				Expect(paths).To(ConsistOf(wantAuthzPath), "the path ext-authz was asked about for %s", raw)
			}
			if routed {
				Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, id, since) }).ShouldNot(BeEmpty(),
					"%s (normalised to %s) did not reach the operator", raw, wantAuthzPath)
			} else {
				Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, id, since) }).
					WithTimeout(time.Second).Should(BeEmpty(), "%s reached the operator", raw)
			}
		},
		// A path no route matches is answered 404 by Envoy itself, and
		// ext_authz is not asked: nothing would be forwarded.
		Entry("%2F is kept: no route for /v2/<manager>%2Fevent, Envoy's own 404, no Check",
			"edge-path-slash", "/v2/example-operator%2Fevent", http.StatusNotFound, "", false),
		// The route's prefix /v2/<manager>/event matches (a prefix match
		// is textual): ext-authz allows the runtime, the operator's
		// listener answers 404 for any path but its event path.
		Entry("%2F..%2F is kept, not resolved across: routed by prefix, ext-authz asked about the raw path, the listener's 404",
			"edge-path-slashdots", "/v2/example-operator/event%2F..%2F..%2Fother", http.StatusNotFound, "/v2/example-operator/event%2F..%2F..%2Fother", false),
		Entry("%2E%2E is decoded (unreserved) and resolved as a dot-segment: routed",
			"edge-path-dotdot", "/v2/x/%2E%2E/example-operator/event", http.StatusOK, "/v2/example-operator/event", true),
		Entry("dot-segments are resolved: routed",
			"edge-path-dots", "/v2/./x/../example-operator/event", http.StatusOK, "/v2/example-operator/event", true),
		Entry("// is kept (merge_slashes off): no route, Envoy's own 404, no Check",
			"edge-path-double", "/v2//example-operator/event", http.StatusNotFound, "", false),
		Entry("%00 is refused by Envoy with 400 before any filter",
			"edge-path-nul", "/v2/example-operator/event%00", http.StatusBadRequest, "", false),
		// The path variants of CVE-2026-73553/-73551/-73511 (issue 42).
		Entry("mixed-case %2f is kept like %2F: no route, Envoy's own 404, no Check",
			"edge-path-slash-lower", "/v2/example-operator%2fevent", http.StatusNotFound, "", false),
		Entry("lower-case %2e%2e is decoded and resolved like %2E%2E: routed",
			"edge-path-dotdot-lower", "/v2/x/%2e%2e/example-operator/event", http.StatusOK, "/v2/example-operator/event", true),
		// Envoy's normalize_path (Chromium's URL canonicalizer) reads a
		// backslash as a slash, before any filter.
		Entry("a backslash is normalised to a slash: routed, ext-authz asked about the normalised path",
			"edge-path-backslash", `/v2/example-operator\event`, http.StatusOK, "/v2/example-operator/event", true),
		Entry("a ; path parameter inside the route's prefix is kept: no route, Envoy's own 404, no Check",
			"edge-path-param-mid", "/v2/example-operator;x=y/event", http.StatusNotFound, "", false),
		Entry("a ; path parameter after the event path is kept: routed by prefix, ext-authz asked about the raw path, the listener's 404",
			"edge-path-param-end", "/v2/example-operator/event;x=y", http.StatusNotFound, "/v2/example-operator/event;x=y", false),
	)

	It("answers request headers over Envoy's 60 KiB limit with 431, without asking ext-authz", func(ctx SpecContext) {
		cert := runtime(ctx, "edge-headers")
		seen := len(checks("edge-headers"))
		big := strings.Repeat("a", 61*1024)
		status, body := postRaw(ctx, cert, contract.EventPath(n.Manager), "edge-headers", map[string]string{"x-big": big}, true)
		Expect(status).To(Equal(http.StatusRequestHeaderFieldsTooLarge), body)
		Expect(checks("edge-headers")[seen:]).To(BeEmpty(), "ext-authz was asked about a request Envoy refused")
		// Just under the limit passes.
		status, body = postRaw(ctx, cert, contract.EventPath(n.Manager), "edge-headers", map[string]string{"x-big": strings.Repeat("a", 50*1024)}, true)
		Expect(status).To(Equal(http.StatusOK), body)
	})

	It("answers 503 while ext-authz is slower than the 0.5 s timeout, the webhook retries, and the change arrives once it answers again", func(ctx SpecContext) {
		cert := runtime(ctx, "edge-slow")
		probe := n.watchedKyma("edge-slow-authz")
		Expect(env.SKR().Create(ctx, probe)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, probe.GetName(), time.Time{})) }).Should(BeNumerically(">=", 1))

		errorsBefore := stats(ctx, `ext_authz\.error$`).Sum("ext_authz.error")
		Expect(is.SetExtAuthzFrozen(true)).To(Succeed())
		DeferCleanup(func() { Expect(is.SetExtAuthzFrozen(false)).To(Succeed()) })
		start := time.Now()
		status, body := postRaw(ctx, cert, contract.EventPath(n.Manager), "edge-slow", nil, false)
		took := time.Since(start)
		Expect(status).To(Equal(http.StatusServiceUnavailable), "the provider's statusOnError: %s", body)
		Expect(took).To(BeNumerically(">=", 450*time.Millisecond), "answered before the timeout")
		AddReportEntry("503 after", took.String())
		Eventually(func(ctx context.Context) uint64 { return stats(ctx, `ext_authz\.error$`).Sum("ext_authz.error") }).
			WithContext(ctx).WithTimeout(30*time.Second).Should(BeNumerically(">", errorsBefore), "Envoy's ext_authz error counter")

		retriesBefore := webhookCounter(ctx, "runtime_watcher_skr_webhook_delivery_attempts_total", map[string]string{"result": "5xx"})
		since := time.Now()
		Expect(setSpec(ctx, probe, "while-ext-authz-is-slow")).To(Succeed())
		Eventually(func(ctx context.Context) float64 {
			return webhookCounter(ctx, "runtime_watcher_skr_webhook_delivery_attempts_total", map[string]string{"result": "5xx"})
		}).WithContext(ctx).WithTimeout(30*time.Second).Should(BeNumerically(">=", retriesBefore+2), "the webhook did not retry the 503")
		Expect(received.For(n.SKRNamespace, probe.GetName(), since)).To(BeEmpty(), "an event passed without ext-authz")

		Expect(is.SetExtAuthzFrozen(false)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, probe.GetName(), since)) }).
			WithTimeout(time.Minute).Should(BeNumerically(">=", 1), "the change made while ext-authz was slow never arrived")
	})

	It("accepts TLS 1.2 and 1.3 (the Gateway's minProtocolVersion TLSV1_2) and refuses 1.0 and 1.1", func(ctx SpecContext) {
		cert := runtime(ctx, "edge-tls")
		base := env.HTTPClient(cert).Transport.(*http.Transport).TLSClientConfig
		for _, v := range []struct {
			version uint16
			name    string
			ok      bool
		}{{tls.VersionTLS10, "TLSv1", false}, {tls.VersionTLS11, "TLSv1.1", false}, {tls.VersionTLS12, "TLSv1.2", true}, {tls.VersionTLS13, "TLSv1.3", true}} {
			cfg := base.Clone()
			cfg.MinVersion, cfg.MaxVersion = v.version, v.version //nolint:gosec // refused versions are the point
			before := stats(ctx, `ssl\.versions\.`).Sum("ssl.versions." + v.name)
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
			body, _ := json.Marshal(probeEvent(n, "edge-tls"))
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+contract.EventPath(n.Manager), bytes.NewReader(body))
			Expect(err).NotTo(HaveOccurred())
			req.Header.Set("Content-Type", "application/json")
			resp, err := c.Do(req)
			if !v.ok {
				Expect(err).To(HaveOccurred(), "%s was accepted", v.name)
				continue
			}
			Expect(err).NotTo(HaveOccurred(), v.name)
			_ = resp.Body.Close()
			Expect(resp.StatusCode).To(Equal(http.StatusOK), v.name)
			Eventually(func(ctx context.Context) uint64 { return stats(ctx, `ssl\.versions\.`).Sum("ssl.versions." + v.name) }).
				WithContext(ctx).WithTimeout(30*time.Second).Should(BeNumerically(">", before), "Envoy's listener counted no %s handshake", v.name)
		}
	})
})

// handshakeRefusal is how the gateway refuses a TLS client that shows
// cert (nil: none; cert is sent whatever CAs the gateway names as
// acceptable, where Go's client would send none): in TLS 1.3 the client's
// side of the handshake ends before the gateway has judged its
// certificate, so the refusal is the alert the client reads next. A
// request written at once may instead meet the closed connection ("broken
// pipe" or a reset, as twice here), so the probe reads, writing nothing,
// and returns the alert itself (a timeout when the gateway took the
// client).
func handshakeRefusal(ctx context.Context, cert *tls.Certificate) error {
	GinkgoHelper()
	tr := env.HTTPClient(nil).Transport.(*http.Transport)
	u, err := url.Parse(env.GatewayURL())
	Expect(err).NotTo(HaveOccurred())
	dial := tr.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	raw, err := dial(ctx, "tcp", u.Host)
	Expect(err).NotTo(HaveOccurred())
	cfg := tr.TLSClientConfig.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	if cert != nil {
		cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
	}
	conn := tls.Client(raw, cfg)
	defer func() { _ = conn.Close() }()
	Expect(conn.SetDeadline(time.Now().Add(10 * time.Second))).To(Succeed())
	if err = conn.HandshakeContext(ctx); err == nil {
		_, err = conn.Read(make([]byte, 1))
	}
	return err
}

// probeEvent is an event about the SKR object name (a Kyma).
func probeEvent(n sample, name string) contract.WatchEvent {
	return contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: n.SKRNamespace, Name: name},
		WatchedGvk: contract.GroupVersionKind{Group: v1beta2.GroupVersion.Group, Version: "v1beta2", Kind: "Kyma"},
	}
}

// postRaw posts an event about the SKR object name to the gateway with the
// request target rawPath sent as it is (no cleaning or escaping by Go), the
// extra headers, over HTTP/1.1 when http1 is set; it returns the status and
// body.
func postRaw(ctx context.Context, cert *tls.Certificate, rawPath, name string, headers map[string]string, http1 bool) (int, string) {
	GinkgoHelper()
	body, _ := json.Marshal(probeEvent(sample(env.Names()), name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+"/", bytes.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.URL.Opaque = rawPath
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	c := env.HTTPClient(cert)
	if http1 {
		t := c.Transport.(*http.Transport).Clone()
		t.TLSClientConfig.NextProtos = []string{"http/1.1"}
		t.ForceAttemptHTTP2 = false
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
		c = &http.Client{Timeout: c.Timeout, Transport: t}
	}
	resp, err := c.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// decision is one line of ext-authz's decision log.
type decision struct {
	Time    time.Time
	Result  string `json:"result"`
	Reason  string `json:"reason"`
	Runtime string `json:"runtime"`
	Path    string `json:"path"`
}

// decisions are the decision log lines in ext-authz's log file about
// runtime id.
func decisions(logFile, id string) []decision {
	GinkgoHelper()
	b, err := os.ReadFile(logFile)
	Expect(err).NotTo(HaveOccurred())
	var out []decision
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Bytes()
		if !bytes.Contains(line, []byte(`"Check decision"`)) {
			continue
		}
		var d decision
		var raw map[string]any
		if json.Unmarshal(line, &d) != nil || json.Unmarshal(line, &raw) != nil || d.Runtime != id {
			continue
		}
		d.Time = logTime(raw)
		out = append(out, d)
	}
	return out
}

// logTime is a zap JSON line's time (RFC 3339 or epoch seconds).
func logTime(raw map[string]any) time.Time {
	switch ts := raw["ts"].(type) {
	case string:
		t, _ := time.Parse(time.RFC3339Nano, ts)
		return t
	case float64:
		return time.Unix(0, int64(ts*float64(time.Second)))
	}
	return time.Time{}
}
