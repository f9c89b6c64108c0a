package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/retirement"
)

// Revocation without CRLs (issue 42, docs/operations.md "A runtime's key
// leaked"), through the real gateway: a certificate the platform no longer
// trusts is refused by ext-authz within a measured time of the KCP write
// that took the trust back. Times are measured from just before the write
// to the first refusal Envoy answered, with one kept-alive client polling
// every 10 ms.
var _ = Describe("Revocation without CRLs (real Envoy)", Ordered, Label("edge"), func() {
	var n sample

	BeforeAll(func(ctx SpecContext) {
		if _, ok := env.(e2e.IstioEnvironment); !ok {
			Fail("the revocation specs read ext-authz's decision log (the local environment)")
		}
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	// poster posts an event about the SKR object name with cert over one
	// kept-alive connection.
	poster := func(cert *tls.Certificate, name string) func(ctx context.Context) (int, string) {
		c := env.HTTPClient(cert)
		return func(ctx context.Context) (int, string) {
			status, reason, _, err := postEvent(ctx, c, contract.EventPath(n.Manager), probeEvent(n, name))
			if err != nil {
				return 0, err.Error()
			}
			return status, reason
		}
	}

	// untilRefused posts until the edge refuses and returns how long after
	// since that was, and the deny reason.
	untilRefused := func(ctx context.Context, post func(context.Context) (int, string), since time.Time, within time.Duration) (time.Duration, string) {
		GinkgoHelper()
		var status int
		var reason string
		Eventually(func(ctx context.Context) int {
			status, reason = post(ctx)
			return status
		}).WithContext(ctx).WithTimeout(within+5*time.Second).WithPolling(10*time.Millisecond).Should(Equal(http.StatusForbidden), "the edge never refused (last: %d %s)", status, reason)
		return time.Since(since), reason
	}

	// ownRuntime creates a Kyma (not managed by vs-controller: no
	// kubeconfig) and a certificate of it, allowed by the edge.
	ownRuntime := func(ctx context.Context, id string, finalizers ...string) (*unstructured.Unstructured, func(context.Context) (int, string)) {
		GinkgoHelper()
		domain := id + ".revocation.example.com"
		kyma := extauthz.Kyma(n.KymaNamespace, id, domain, nil)
		kyma.SetFinalizers(finalizers)
		Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			k := kyma.DeepCopy()
			if env.KCP().Get(ctx, client.ObjectKeyFromObject(k), k) == nil {
				Expect(env.KCP().Patch(ctx, k, client.RawPatch("application/merge-patch+json", []byte(`{"metadata":{"finalizers":null}}`)))).To(Succeed())
				Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, k))).To(Succeed())
			}
		})
		c, err := env.IssueClientCert(pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})
		Expect(err).NotTo(HaveOccurred())
		post := poster(&c, id)
		Eventually(func(ctx context.Context) int { s, _ := post(ctx); return s }).WithContext(ctx).WithTimeout(30*time.Second).
			Should(Equal(http.StatusOK), "ext-authz never allowed the new runtime")
		return kyma, post
	}

	DescribeTable("refuses a runtime's existing certificate within 1 s of the KCP write that took the trust back",
		func(ctx SpecContext, id string, finalizer bool, write func(ctx context.Context, kyma *unstructured.Unstructured), wantReason contract.DenyReason) {
			var fin []string
			if finalizer {
				fin = []string{"e2e.runtime-watcher/hold"}
			}
			kyma, post := ownRuntime(ctx, id, fin...)
			start := time.Now()
			write(ctx, kyma)
			written := time.Since(start)
			took, reason := untilRefused(ctx, post, start, time.Second)
			AddReportEntry(fmt.Sprintf("%s: KCP write to the first refusal through Envoy", id), took.Round(time.Millisecond).String())
			GinkgoWriter.Printf("%s: the KCP write took %s; first refusal through Envoy %s after it began\n", id, written.Round(time.Millisecond), took.Round(time.Millisecond))
			Expect(reason).To(Equal(string(wantReason)))
			Expect(took).To(BeNumerically("<=", time.Second), "refused only %s after the KCP write", took)
		},
		Entry("the Kyma deleted", "revocation-deleted", false, func(ctx context.Context, kyma *unstructured.Unstructured) {
			Expect(env.KCP().Delete(ctx, kyma)).To(Succeed())
		}, contract.ReasonUnknownRuntime),
		// Every Kyma vs-controller manages carries its finalizer: the
		// deletion is asked for long before the Kyma is gone.
		Entry("the Kyma's deletion asked for, a finalizer holding it", "revocation-finalized", true, func(ctx context.Context, kyma *unstructured.Unstructured) {
			Expect(env.KCP().Delete(ctx, kyma)).To(Succeed())
		}, contract.ReasonUnknownRuntime),
		Entry("its skr-domain changed (re-homed)", "revocation-rehomed", false, func(ctx context.Context, kyma *unstructured.Unstructured) {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"elsewhere.revocation.example.com"}}}`, contract.AnnotationSKRDomain)
			Expect(env.KCP().Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
		}, contract.ReasonSANMismatch),
	)

	// newerInSKR waits until the SKR holds a certificate issued after old
	// (polled every 20 ms) and returns when that was seen.
	newerInSKR := func(ctx context.Context, old *x509.Certificate, within time.Duration) time.Time {
		GinkgoHelper()
		Eventually(func(g Gomega) {
			g.Expect(skrLeaf(ctx, g, n).NotBefore.After(old.NotBefore)).To(BeTrue())
		}).WithContext(ctx).WithTimeout(within).WithPolling(20*time.Millisecond).Should(Succeed(), "no newer runtime certificate reached the SKR")
		return time.Now()
	}
	// eventsFlow: a change in the SKR reaches the operator.
	eventsFlow := func(ctx context.Context, name string) {
		GinkgoHelper()
		probe := n.watchedKyma(name)
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, probe))).To(Succeed())
		since := time.Now()
		Expect(setSpec(ctx, probe, "after-"+name)).To(Succeed())
		Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, name, since) }).WithTimeout(time.Minute).
			ShouldNot(BeEmpty(), "a change in the SKR made after the new certificate did not arrive")
	}

	const overlap = 8 * time.Second

	It("revokes the runtime's current certificate on one annotation: a new one is delivered first, events flow on it, the old one is refused within 5 s", func(ctx SpecContext) {
		h, ok := env.(e2e.HealthEnvironment)
		Expect(ok).To(BeTrue(), "the spec restarts vs-controller (the local environment)")
		By(fmt.Sprintf("restarting vs-controller with a renewal overlap of %s (the default is %s)", overlap, retirement.DefaultOverlap))
		Expect(h.Health().RestartController(ctx, "--certificate-overlap="+overlap.String())).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(h.Health().RestartController(ctx)).To(Succeed()) })
		pathReady(ctx, n)

		leaked, pair := sampleRuntimeCert(ctx, n)
		post := poster(pair, "revocation-leaked")
		Expect(post(ctx)).To(Equal(http.StatusOK), "the certificate to revoke is not allowed to begin with") // and no deny reason

		By("annotating the runtime's Certificate " + contract.RevokeCertificateAnnotation)
		crt := &certmanagerv1.Certificate{}
		crt.Namespace, crt.Name = n.KymaNamespace, certificates.Name(n.RuntimeID)
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"e2e: key leaked"}}}`, contract.RevokeCertificateAnnotation)
		Expect(env.KCP().Patch(ctx, crt, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())

		delivered := newerInSKR(ctx, leaked, 2*time.Minute)
		took, reason := untilRefused(ctx, post, delivered, 5*time.Second)
		AddReportEntry("revocation: new certificate in the SKR to the first refusal of the old one through Envoy", took.Round(time.Millisecond).String())
		GinkgoWriter.Printf("revocation: the old certificate refused %s after the new one reached the SKR\n", took.Round(time.Millisecond))
		Expect(reason).To(Equal(string(contract.ReasonRevoked)))
		Expect(took).To(BeNumerically("<=", 5*time.Second))
		Expect(decisions(extAuthzLog(), n.RuntimeID)).To(ContainElement(HaveField("Reason", string(contract.ReasonRevoked))), "the decision log says revoked")
		Eventually(func(g Gomega) {
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(crt), crt)).To(Succeed())
			g.Expect(crt.Annotations).NotTo(HaveKey(contract.RevokeCertificateAnnotation))
		}).Should(Succeed(), "the revocation request stays on the Certificate")

		By("events keep flowing on the new certificate")
		eventsFlow(ctx, "revocation-after-revoke")
		Consistently(func(ctx context.Context) int { s, _ := post(ctx); return s }).WithContext(ctx).WithTimeout(time.Second).WithPolling(100*time.Millisecond).Should(Equal(http.StatusForbidden), "the revoked certificate was allowed again")

		By("a renewal retires the previous certificate after the overlap")
		previous, prevPair := sampleRuntimeCert(ctx, n)
		postPrev := poster(prevPair, "revocation-renewed")
		Expect(postPrev(ctx)).To(Equal(http.StatusOK))
		renewed := newerInSKR(ctx, previous, 2*time.Minute) // the runtime certificates renew every 40 s here
		Expect(postPrev(ctx)).To(Equal(http.StatusOK), "the previous certificate is refused at once after a renewal: no overlap")
		// One overlap runs at a time: a renewal within the overlap of the
		// one before waits for it, so the bound is two overlaps.
		took, reason = untilRefused(ctx, postPrev, renewed, 2*overlap+5*time.Second)
		AddReportEntry("renewal: new certificate in the SKR to the first refusal of the previous one", took.Round(time.Millisecond).String())
		Expect(reason).To(Equal(string(contract.ReasonRevoked)))
		Expect(took).To(BeNumerically(">=", overlap-time.Second), "refused before the overlap ended")
		Expect(took).To(BeNumerically("<=", 2*overlap+5*time.Second), "the overlap is not bounded")
		eventsFlow(ctx, "revocation-after-renewal")
	})
})

// postEvent posts body (an event, as JSON) to the gateway's path with c:
// the e2e suite's one way to post as an SKR's webhook does. It returns the
// status, the deny reason and up to 4 KiB of the answer, or the error of
// the request (a refused TLS handshake).
func postEvent(ctx context.Context, c *http.Client, path string, body any) (status int, reason, answer string, err error) {
	b, err := json.Marshal(body)
	if err != nil {
		return 0, "", "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+path, bytes.NewReader(b))
	if err != nil {
		return 0, "", "", err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.Do(req)
	if err != nil {
		return 0, "", "", err
	}
	defer resp.Body.Close()
	a, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode, resp.Header.Get(contract.HeaderDenyReason), string(a), nil
}

// extAuthzLog is the gateway's ext-authz log file (its decision log).
func extAuthzLog() string {
	GinkgoHelper()
	ie, ok := env.(e2e.IstioEnvironment)
	Expect(ok).To(BeTrue())
	return ie.Istio().ExtAuthzLog()
}
