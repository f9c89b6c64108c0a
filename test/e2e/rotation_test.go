package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// The CA rotation of docs/certificates.md, end to end: while a writer keeps
// changing watched objects in the SKR, the runtime CA is rotated twice and
// the gateway CA once, on demand and with a new key each time (the Issuing
// condition, as `cmctl renew` sets it), and the runtime certificate renews
// on its own short lifetime meanwhile. Nothing may be lost and no delivery
// may fail in the TLS handshake.
var _ = Describe("CA rotation", Label("ca-rotation"), Ordered, func() {
	var n sample
	const writers = 4

	BeforeAll(func(ctx SpecContext) {
		n = sample(env.Names())
		// Another spec may have deleted the sample Watcher.
		w := localenv.SampleWatcher()
		w.Name, w.Namespace = n.WatcherName, n.KymaNamespace
		if err := env.KCP().Create(ctx, w); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		pathReady(ctx, n)
	})

	It("rotates the runtime CA twice and the gateway CA once with no lost event and no TLS failure", func(ctx SpecContext) {
		// vs-controller re-issues by a new CA only after it settled in the
		// trust anchors (--ca-settle: 2 min in the shipped configuration,
		// a kubelet's Secret volume sync; 12 s locally), then cert-manager
		// issues and vs-controller delivers.
		reissueWithin := max(2*time.Minute, n.CASettle+time.Minute)
		tlsBefore := tlsFailures(ctx)

		By("writing watched objects continuously")
		w := startWriter(ctx, n, writers)
		leaves := watchLeaves(ctx, n)

		for round := 1; round <= 2; round++ {
			By(fmt.Sprintf("rotating the runtime CA (%d of 2)", round))
			start := time.Now()
			oldCA, newCA := rotateCA(ctx, n.KymaNamespace, "runtime-watcher-ca")
			Eventually(func(g Gomega) {
				g.Expect(caBundleOf(ctx, g, n)).To(ContainElement(sameCert(newCA)))
				g.Expect(clientCABundle(ctx, g, n)).To(ContainElement(sameCert(newCA)))
			}).WithTimeout(time.Minute).Should(Succeed(), "the new runtime CA did not reach the SKR's caBundle and the gateway's client CA")
			AddReportEntry(fmt.Sprintf("runtime CA rotation %d: trust bundles updated", round), time.Since(start).Round(time.Millisecond).String())
			Eventually(func(g Gomega) {
				leaf := skrLeaf(ctx, g, n)
				g.Expect(leaf.CheckSignatureFrom(newCA)).To(Succeed())
			}).WithTimeout(reissueWithin).Should(Succeed(), "the runtime certificate in the SKR was not re-issued by the new CA")
			AddReportEntry(fmt.Sprintf("runtime CA rotation %d: runtime certificate re-issued", round), time.Since(start).Round(time.Millisecond).String())
			Eventually(func(g Gomega) {
				g.Expect(caBundleOf(ctx, g, n)).NotTo(ContainElement(sameCert(oldCA)))
				g.Expect(clientCABundle(ctx, g, n)).NotTo(ContainElement(sameCert(oldCA)))
			}).WithTimeout(reissueWithin).Should(Succeed(), "the unused old runtime CA stayed in the trust bundles")
			AddReportEntry(fmt.Sprintf("runtime CA rotation %d: old CA dropped", round), time.Since(start).Round(time.Millisecond).String())

			if round == 1 {
				By("rotating the gateway CA")
				start := time.Now()
				oldGW, newGW := rotateCA(ctx, n.GatewayNS, localenv.GatewayCAName)
				Eventually(func(g Gomega) {
					g.Expect(skrGatewayBundle(ctx, g, n)).To(ContainElement(sameCert(newGW)))
				}).WithTimeout(time.Minute).Should(Succeed(), "the new gateway CA did not reach the SKR's ca.crt")
				Eventually(func(g Gomega) {
					var s corev1.Secret
					g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.GatewayNS, Name: localenv.GatewayTLSSecret}, &s)).To(Succeed())
					g.Expect(certs(s.Data["tls.crt"])).NotTo(BeEmpty())
					g.Expect(certs(s.Data["tls.crt"])[0].CheckSignatureFrom(newGW)).To(Succeed())
				}).WithTimeout(reissueWithin).Should(Succeed(), "the gateway certificate was not re-issued by the new gateway CA")
				Eventually(func(g Gomega) {
					g.Expect(skrGatewayBundle(ctx, g, n)).NotTo(ContainElement(sameCert(oldGW)))
				}).WithTimeout(reissueWithin).Should(Succeed(), "the unused old gateway CA stayed in the SKR's ca.crt")
				AddReportEntry("gateway CA rotation: done", time.Since(start).Round(time.Millisecond).String())
			}
		}

		By("letting the runtime certificate renew on its own lifetime as well")
		Eventually(func() int { return leaves.distinct() }).WithTimeout(3*time.Minute).WithPolling(time.Second).
			Should(BeNumerically(">=", 5), "runtime certificates seen in the SKR: the first, two rotations and at least two renewals")

		By("stopping the writer; every final state must arrive")
		last := w.stop()
		Expect(w.errors()).To(BeEmpty(), "SKR writes failed")
		for name, at := range last {
			Eventually(func() []string { return runtimeIDs(received.For(n.SKRNamespace, name, at)) }).
				Should(ContainElement(n.RuntimeID), "the final state of %s (written %s) was not received", name, at.Format(time.RFC3339Nano))
		}
		AddReportEntry("SKR writes during the rotations", strconv.Itoa(w.count()))

		By("counting TLS failures of deliveries")
		Expect(tlsFailures(ctx)-tlsBefore).To(BeZero(), "deliveries failed in the TLS handshake during the rotations")

		By("checking that no trust anchor holds an expired CA")
		now := time.Now()
		Eventually(func(g Gomega) {
			anchors := map[string][]*x509.Certificate{
				"SKR caBundle": caBundleOf(ctx, g, n), "SKR ca.crt": skrGatewayBundle(ctx, g, n), "gateway client CA": clientCABundle(ctx, g, n),
			}
			for _, cm := range []string{"runtime-watcher-trust-runtime", "runtime-watcher-trust-gateway"} {
				var c corev1.ConfigMap
				g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: cm}, &c)).To(Succeed())
				anchors[cm] = certs([]byte(c.Data[trust.StoreKey]))
			}
			for name, cas := range anchors {
				g.Expect(cas).NotTo(BeEmpty(), name)
				for _, c := range cas {
					g.Expect(c.NotAfter.After(now)).To(BeTrue(), "%s holds CA %s, expired at %s", name, c.Subject, c.NotAfter)
				}
			}
		}).Should(Succeed())
	})
})

// rotateCA renews a CA Certificate as `cmctl renew` does (status condition
// Issuing=True) and waits for its Secret to hold a new CA with a new key.
func rotateCA(ctx context.Context, namespace, name string) (oldCA, newCA *x509.Certificate) {
	GinkgoHelper()
	key := client.ObjectKey{Namespace: namespace, Name: name}
	var s corev1.Secret
	Expect(env.KCP().Get(ctx, key, &s)).To(Succeed())
	oldCA = certs(s.Data["tls.crt"])[0]
	crt := &certmanagerv1.Certificate{}
	Expect(env.KCP().Get(ctx, key, crt)).To(Succeed())
	orig := crt.DeepCopy()
	crt.Status.Conditions = append(crt.Status.Conditions, certmanagerv1.CertificateCondition{
		Type: certmanagerv1.CertificateConditionIssuing, Status: cmmeta.ConditionTrue,
		Reason: "ManuallyTriggered", Message: "Certificate re-issuance manually triggered",
	})
	Expect(env.KCP().Status().Patch(ctx, crt, client.MergeFrom(orig))).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(env.KCP().Get(ctx, key, &s)).To(Succeed())
		cs := certs(s.Data["tls.crt"])
		g.Expect(cs).NotTo(BeEmpty())
		newCA = cs[0]
		g.Expect(newCA.Equal(oldCA)).To(BeFalse())
	}).Should(Succeed(), "CA %s was not renewed", key)
	Expect(bytes.Equal(newCA.RawSubjectPublicKeyInfo, oldCA.RawSubjectPublicKeyInfo)).To(BeFalse(), "the renewed CA must have a new key")
	return oldCA, newCA
}

func certs(pemData []byte) []*x509.Certificate {
	cs, _ := trust.ParseBundle(pemData)
	return cs
}

func sameCert(c *x509.Certificate) OmegaMatcher {
	return WithTransform(func(o *x509.Certificate) bool { return o.Equal(c) }, BeTrue())
}

func caBundleOf(ctx context.Context, g Gomega, n sample) []*x509.Certificate {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	g.Expect(env.SKR().Get(ctx, client.ObjectKey{Name: "skr-webhook"}, &vwc)).To(Succeed())
	g.Expect(vwc.Webhooks).NotTo(BeEmpty())
	for _, wh := range vwc.Webhooks[1:] {
		g.Expect(wh.ClientConfig.CABundle).To(Equal(vwc.Webhooks[0].ClientConfig.CABundle))
	}
	return certs(vwc.Webhooks[0].ClientConfig.CABundle)
}

func skrSecret(ctx context.Context, g Gomega, n sample) *corev1.Secret {
	var s corev1.Secret
	g.Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: "skr-webhook-tls"}, &s)).To(Succeed())
	return &s
}

// sampleRuntimeCert is the certificate the sample runtime presents now,
// with its key: the one in its SKR, issued by vs-controller. Specs that act
// as the sample runtime use it rather than one they issue themselves: a
// certificate a spec issues is backdated an hour (test/pki), so once the
// revocation spec retired the runtime's older certificates, the edge
// rightly refuses it (revoked).
func sampleRuntimeCert(ctx context.Context, n sample) (*x509.Certificate, *tls.Certificate) {
	GinkgoHelper()
	var leaf *x509.Certificate
	var pair tls.Certificate
	Eventually(func(g Gomega) {
		s := skrSecret(ctx, g, n)
		var err error
		pair, err = tls.X509KeyPair(s.Data["tls.crt"], s.Data["tls.key"])
		g.Expect(err).NotTo(HaveOccurred())
		leaf, err = x509.ParseCertificate(pair.Certificate[0])
		g.Expect(err).NotTo(HaveOccurred())
	}).WithContext(ctx).Should(Succeed())
	return leaf, &pair
}

func skrGatewayBundle(ctx context.Context, g Gomega, n sample) []*x509.Certificate {
	return certs(skrSecret(ctx, g, n).Data["ca.crt"])
}

func skrLeaf(ctx context.Context, g Gomega, n sample) *x509.Certificate {
	cs := certs(skrSecret(ctx, g, n).Data["tls.crt"])
	g.Expect(cs).NotTo(BeEmpty())
	return cs[0]
}

func clientCABundle(ctx context.Context, g Gomega, n sample) []*x509.Certificate {
	var s corev1.Secret
	g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.GatewayNS, Name: localenv.GatewayTLSSecret + "-cacert"}, &s)).To(Succeed())
	return certs(s.Data["ca.crt"])
}

// tlsFailures is runtime_watcher_skr_webhook_tls_failures_total summed over
// the runtime's webhooks.
func tlsFailures(ctx context.Context) float64 {
	GinkgoHelper()
	text, err := env.WebhookMetrics(ctx)
	Expect(err).NotTo(HaveOccurred())
	sum, found := promtext.Sum(text, "runtime_watcher_skr_webhook_tls_failures_total", nil)
	Expect(found).To(BeTrue(), "the webhook exports no runtime_watcher_skr_webhook_tls_failures_total")
	return sum
}

// writer changes watched SKR objects continuously and remembers each
// successful write (what was last written when, and how many, follow).
type writer struct {
	objects []string // the names of the objects it writes
	cancel  context.CancelFunc
	done    chan struct{}
	mu      sync.Mutex
	errs    []error
	spans   []writeSpan
}

func startWriter(ctx context.Context, n sample, objects int) *writer {
	GinkgoHelper()
	kymas := make([]*unstructured.Unstructured, objects)
	for i := range kymas {
		kymas[i] = n.watchedKyma(fmt.Sprintf("rotation-%d", i))
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, kymas[i]))).To(Succeed())
	}
	return startWriterOn(ctx, kymas)
}

// startWriterOn changes the spec of the given existing objects in turn.
func startWriterOn(ctx context.Context, kymas []*unstructured.Unstructured) *writer {
	wctx, cancel := context.WithCancel(ctx)
	w := &writer{cancel: cancel, done: make(chan struct{})}
	for _, k := range kymas {
		w.objects = append(w.objects, k.GetName())
	}
	go func() {
		defer GinkgoRecover()
		defer close(w.done)
		t := time.NewTicker(50 * time.Millisecond) // pacing: about 20 writes a second
		defer t.Stop()
		for i := 0; ; i++ {
			k := kymas[i%len(kymas)]
			before := time.Now()
			err := setSpec(wctx, k, fmt.Sprintf("w-%d", i))
			w.mu.Lock()
			switch {
			case wctx.Err() != nil:
			case err != nil:
				w.errs = append(w.errs, err)
			default:
				w.spans = append(w.spans, writeSpan{name: k.GetName(), start: before, end: time.Now()})
			}
			w.mu.Unlock()
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return w
}

// stop ends the writer and returns, per object, the time of its last write.
func (w *writer) stop() map[string]time.Time {
	w.cancel()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]time.Time{}
	for _, sp := range w.spans {
		out[sp.name] = sp.start // spans are in order: the last one stays
	}
	return out
}

func (w *writer) errors() []error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.errs
}

// writeSpan is one successful write: the object and the time from the
// request's start to its answer. Admission of the write happened in it.
type writeSpan struct {
	name       string
	start, end time.Time
}

// writeSpans returns every successful write, in order.
func (w *writer) writeSpans() []writeSpan {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.spans)
}

func (w *writer) count() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.spans)
}

// leafWatch records every distinct runtime certificate the SKR Secret held.
type leafWatch struct {
	mu   sync.Mutex
	seen map[string]bool
}

func watchLeaves(ctx context.Context, n sample) *leafWatch {
	l := &leafWatch{seen: map[string]bool{}}
	go func() {
		t := time.NewTicker(200 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			var s corev1.Secret
			if env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: "skr-webhook-tls"}, &s) == nil {
				l.mu.Lock()
				l.seen[string(s.Data["tls.crt"])] = true
				l.mu.Unlock()
			}
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	}()
	return l
}

func (l *leafWatch) distinct() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.seen)
}
