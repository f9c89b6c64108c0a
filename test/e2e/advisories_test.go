package e2e_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/net/http2"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Envoy's 2025–26 advisories of the SAN and path class (issue 42), each as
// an attack through the real gateway, refused or harmless: certificates
// whose names decode differently in different parsers (a NUL inside a SAN
// or the CN: CVE-2025-66220, CVE-2026-47778), names that disagree or repeat,
// a CN in another string type, SAN text that looks like XFCC syntax, a
// CONNECT without :path (CVE-2026-73547) and a client reset while a Check
// is in flight (CVE-2026-47205). The encoded-path variants
// (CVE-2026-73553/-73551/-73511) are entries of the edge spec's path table.
// The odd certificates come from the runtime CA itself: the worst case, a
// CA that signs whatever it is asked. The same inputs seed the fuzz targets
// of identity/xfcc.
var _ = Describe("Envoy's advisories as specs (real Envoy)", Ordered, Label("edge"), func() {
	var (
		n  sample
		is e2e.IstioControls
	)
	const victim, victimDomain = "adv-victim", "adv-victim.advisories.example.com"

	BeforeAll(func(ctx SpecContext) {
		ie, ok := env.(e2e.IstioEnvironment)
		if !ok {
			Fail("the advisory specs read the gateway's Envoy admin API (the local environment)")
		}
		is = ie.Istio()
		n = sample(env.Names())
		pathReady(ctx, n)
		kyma := extauthz.Kyma(n.KymaNamespace, victim, victimDomain, nil)
		Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, kyma)).To(Succeed()) })
	})

	// kyma creates the Kyma of runtime id with domain.
	kyma := func(ctx context.Context, id, domain string) {
		GinkgoHelper()
		k := extauthz.Kyma(n.KymaNamespace, id, domain, nil)
		Expect(env.KCP().Create(ctx, k)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, k)).To(Succeed()) })
	}
	// serverUptime is Envoy's server.uptime: it starts again from 0 when
	// Envoy restarts (a crash, pilot-agent starting it again).
	serverUptime := func(ctx context.Context) uint64 {
		GinkgoHelper()
		up, err := is.GatewayAdmin().Counter(ctx, "server.uptime")
		Expect(err).NotTo(HaveOccurred())
		return up
	}

	type oddCert struct {
		// leaf is the certificate's options for runtime id, domain.
		leaf func(id, domain string) pki.LeafOptions
		// reasons the edge may refuse it for: ext-authz decodes the
		// certificate itself, or refuses the header when the gateway
		// copied a name into it that breaks the XFCC grammar
		// (malformed-xfcc). None: it is allowed as runtime id (harmless:
		// the identity is the one the CA named).
		reasons []contract.DenyReason
	}
	DescribeTable("refuses certificates whose names a parser could read differently, or allows them as the one runtime they name",
		func(ctx SpecContext, id string, c oddCert) {
			domain := id + ".advisories.example.com"
			kyma(ctx, id, domain)
			cert, err := env.IssueClientCert(c.leaf(id, domain))
			Expect(err).NotTo(HaveOccurred())
			seen := len(decisions(is.ExtAuthzLog(), id))
			since := time.Now()
			var status int
			var body string
			var deny contract.DenyBody
			// ext-authz's cache knows the new Kyma within a second (the
			// revocation spec measures it): until then the answer is
			// unknown-runtime.
			Eventually(func(ctx context.Context) bool {
				status, body = postRaw(ctx, &cert, contract.EventPath(n.Manager), id, nil, false)
				deny = contract.DenyBody{}
				_ = json.Unmarshal([]byte(body), &deny)
				return deny.Reason != contract.ReasonUnknownRuntime || slices.Contains(c.reasons, contract.ReasonUnknownRuntime)
			}).WithContext(ctx).WithTimeout(10*time.Second).Should(BeTrue(), "status %d: %s", status, body)
			if len(c.reasons) > 0 {
				AddReportEntry(id+": refused", string(deny.Reason))
				Expect(status).To(Equal(http.StatusForbidden), body)
				Expect(c.reasons).To(ContainElement(deny.Reason), body)
				Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, id, since) }, quietPeriod).Should(BeEmpty())
				return
			}
			Expect(status).To(Equal(http.StatusOK), body)
			Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, id, since) }).
				Should(ContainElement(HaveField("RuntimeID", id)), "the event did not arrive as runtime %s", id)
			Expect(decisions(is.ExtAuthzLog(), id)[seen:]).To(ContainElement(HaveField("Result", "allow")))
		},
		Entry("a NUL inside the SAN: the domain as its prefix (CVE-2025-66220)", "adv-nul-san", oddCert{
			leaf: func(id, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: id, DNSNames: []string{domain + "\x00.attacker.example.com"}}
			}, reasons: []contract.DenyReason{contract.ReasonSANMismatch, contract.ReasonMalformedXFCC}}),
		Entry("a NUL inside the CN: the runtime ID as its prefix (CVE-2026-47778)", "adv-nul-cn", oddCert{
			leaf: func(id, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: id + "\x00.attacker", DNSNames: []string{domain}}
			}, reasons: []contract.DenyReason{contract.ReasonUnknownRuntime, contract.ReasonMalformedXFCC}}),
		Entry("CN and SAN that disagree: this runtime's CN, another runtime's domain", "adv-disagree", oddCert{
			leaf: func(id, _ string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: id, DNSNames: []string{victimDomain}}
			}, reasons: []contract.DenyReason{contract.ReasonSANMismatch}}),
		Entry("CN and SAN that disagree: another runtime's CN, this runtime's domain", "adv-disagree-cn", oddCert{
			leaf: func(_, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: victim, DNSNames: []string{domain}}
			}, reasons: []contract.DenyReason{contract.ReasonSANMismatch}}),
		Entry("duplicate SANs: harmless, the runtime they name", "adv-dup-san", oddCert{
			leaf: func(id, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: id, DNSNames: []string{domain, domain, strings.ToUpper(domain)}}
			}}),
		Entry("the CN as a BMPString: harmless, decoded once, the runtime it names", "adv-bmp-cn", oddCert{
			leaf: func(id, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: id, CommonNameBMP: true, DNSNames: []string{domain}}
			}}),
		Entry("SAN text that looks like XFCC syntax (;, \", =, ,) claiming another runtime's domain", "adv-xfcc-san", oddCert{
			leaf: func(_, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: victim, DNSNames: []string{
					domain + ";DNS=" + victimDomain, domain + `";DNS="` + victimDomain, "x=" + victimDomain + ",DNS=" + victimDomain,
				}}
			}, reasons: []contract.DenyReason{contract.ReasonSANMismatch, contract.ReasonMalformedXFCC}}),
		Entry("CN text that looks like XFCC syntax naming another runtime", "adv-xfcc-cn", oddCert{
			leaf: func(id, domain string) pki.LeafOptions {
				return pki.LeafOptions{CommonName: victim + `";DNS=` + victimDomain + `,By=` + id, DNSNames: []string{domain}}
			}, reasons: []contract.DenyReason{contract.ReasonUnknownRuntime, contract.ReasonMalformedXFCC}}),
	)

	// h2Client is an HTTP/2 client of the gateway presenting cert, on one
	// connection.
	h2Client := func(cert *tls.Certificate) *http.Client {
		cfg := env.HTTPClient(cert).Transport.(*http.Transport).TLSClientConfig.Clone()
		cfg.NextProtos = []string{"h2"}
		return &http.Client{Timeout: 10 * time.Second, Transport: &http2.Transport{TLSClientConfig: cfg}}
	}
	post := func(ctx context.Context, c *http.Client, name string) (int, string, error) {
		status, reason, _, err := postEvent(ctx, c, contract.EventPath(n.Manager), probeEvent(n, name))
		return status, reason, err
	}
	// status posts with c and is the answer's status.
	status := func(ctx context.Context, c *http.Client, name string) int {
		GinkgoHelper()
		s, _, err := post(ctx, c, name)
		Expect(err).NotTo(HaveOccurred())
		return s
	}
	certFor := func(id, domain string) *tls.Certificate {
		GinkgoHelper()
		c, err := env.IssueClientCert(pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})
		Expect(err).NotTo(HaveOccurred())
		return &c
	}

	It("answers a CONNECT without :path (HTTP/2 and HTTP/1.1) without forwarding it, and keeps running (CVE-2026-73547)", func(ctx SpecContext) {
		id := "adv-connect"
		kyma(ctx, id, id+".advisories.example.com")
		cert := certFor(id, id+".advisories.example.com")
		ok := h2Client(cert)
		Eventually(func(ctx context.Context) int { s, _, _ := post(ctx, ok, id); return s }).WithContext(ctx).WithTimeout(10 * time.Second).Should(Equal(http.StatusOK))
		Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, id, time.Time{}) }).ShouldNot(BeEmpty())
		up := serverUptime(ctx)
		since := time.Now() // after the allowed event arrived
		for _, c := range []struct {
			name   string
			client *http.Client
		}{{"HTTP/2", ok}, {"HTTP/1.1", env.HTTPClient(cert)}} {
			req, err := http.NewRequestWithContext(ctx, http.MethodConnect, env.GatewayURL(), nil)
			Expect(err).NotTo(HaveOccurred())
			req.URL.Path, req.Host = "", req.URL.Host // CONNECT: authority only, no :path
			resp, err := c.client.Do(req)
			if err == nil {
				_ = resp.Body.Close()
				AddReportEntry("CONNECT without :path over "+c.name, resp.Status)
				Expect(resp.StatusCode).To(BeNumerically(">=", 400), "%s CONNECT answered %s", c.name, resp.Status)
			} else {
				AddReportEntry("CONNECT without :path over "+c.name, err.Error())
			}
		}
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, id, since) }, quietPeriod).Should(BeEmpty())
		Expect(status(ctx, h2Client(cert), id)).To(Equal(http.StatusOK), "the gateway no longer serves")
		Expect(serverUptime(ctx)).To(BeNumerically(">=", up), "Envoy restarted")
	})

	It("forgets a Check reset in flight: the next request on the same and on another connection is judged on its own, and Envoy keeps running (CVE-2026-47205)", func(ctx SpecContext) {
		okID, badID := "adv-reset-ok", "adv-reset-bad"
		kyma(ctx, okID, okID+".advisories.example.com")
		kyma(ctx, badID, badID+".advisories.example.com")
		good := h2Client(certFor(okID, okID+".advisories.example.com"))
		bad := h2Client(certFor(badID, "somewhere-else.advisories.example.com")) // san-mismatch
		Eventually(func(ctx context.Context) int { s, _, _ := post(ctx, good, okID); return s }).WithContext(ctx).WithTimeout(10 * time.Second).Should(Equal(http.StatusOK))
		Expect(status(ctx, bad, badID)).To(Equal(http.StatusForbidden))
		up := serverUptime(ctx)
		inFlight := func(ctx context.Context) uint64 {
			s, err := is.GatewayAdmin().Stats(ctx, `ext-authz.*upstream_rq_active$`)
			Expect(err).NotTo(HaveOccurred())
			return s.Sum("upstream_rq_active")
		}

		// resetInFlight sends a request with c while ext-authz answers
		// nothing, and resets it once Envoy's Check of it is in flight.
		resetInFlight := func(ctx context.Context, c *http.Client, name string) {
			GinkgoHelper()
			Expect(is.SetExtAuthzFrozen(true)).To(Succeed())
			DeferCleanup(func() { Expect(is.SetExtAuthzFrozen(false)).To(Succeed()) })
			before := inFlight(ctx)
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() {
				defer GinkgoRecover()
				_, _, err := post(rctx, c, name)
				done <- err
			}()
			Eventually(inFlight).WithContext(ctx).WithTimeout(400*time.Millisecond).WithPolling(5*time.Millisecond).
				Should(BeNumerically(">", before), "Envoy's Check never went out")
			cancel() // RST_STREAM while the Check is in flight
			Eventually(done).Should(Receive(MatchError(ContainSubstring("context canceled"))))
			Expect(is.SetExtAuthzFrozen(false)).To(Succeed())
		}

		By("resetting an allowed runtime's request in flight; then a refused runtime's request on another connection")
		since := time.Now()
		resetInFlight(ctx, good, okID+"-reset")
		seen := len(decisions(is.ExtAuthzLog(), badID))
		Expect(status(ctx, bad, badID)).To(Equal(http.StatusForbidden), "the refused runtime was allowed after a reset")
		Eventually(func() []decision { return decisions(is.ExtAuthzLog(), badID)[seen:] }).Should(ContainElement(HaveField("Reason", string(contract.ReasonSANMismatch))), "no Check of its own")

		By("resetting a refused runtime's request in flight; then its next request on the same connection")
		resetInFlight(ctx, bad, badID+"-reset")
		Expect(status(ctx, bad, badID)).To(Equal(http.StatusForbidden), "allowed on the connection of a reset")
		Expect(status(ctx, good, okID)).To(Equal(http.StatusOK), "the allowed runtime is refused after a reset")
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, okID+"-reset", since) }, quietPeriod).Should(BeEmpty(), "a reset request was forwarded")
		Expect(received.For(n.SKRNamespace, badID, since)).To(BeEmpty(), "the refused runtime reached the operator")
		Expect(serverUptime(ctx)).To(BeNumerically(">=", up), "Envoy restarted")
	})
})
