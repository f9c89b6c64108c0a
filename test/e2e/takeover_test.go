package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
)

// Take-over of a runtime that Lifecycle Manager (LM) set up
// (docs/migrating-from-lifecycle-manager.md, issue 17), end to end. The
// sample runtime is staged as LM leaves it — vs-controller's bundle
// removed, LM's ten SKR objects from test/fixtures applied as LM applies
// them, with a test "LM CA" — and LM's webhook runs: events flow through
// the gateway, which trusts LM's CA through the trust window
// (--migration-extra-ca-secret). Then vs-controller takes over while a
// writer keeps changing watched objects: every final state reaches the
// operator, every write is reviewed by one of the two webhooks (none by
// neither; at most a few twice, see the count), and no LM object is left. The spec leaves the runtime with vs-controller's
// bundle, as it found it, and the trust window closed.
var _ = Describe("Take-over from Lifecycle Manager", Label("takeover"), Ordered, func() {
	const (
		writers  = 4
		lmCAName = "klm-watcher-selfsigned-ca" // LM's CA's common name
	)
	var (
		n        sample
		tc       e2e.TakeoverControls
		lmCA     *pki.CA
		lmHook   e2e.ExtraWebhook
		lmSecret = client.ObjectKey{Namespace: localenv.GatewayNamespace, Name: "klm-watcher"} // LM's CA Secret in the KCP
	)

	BeforeAll(func(ctx SpecContext) {
		te, ok := env.(e2e.TakeoverEnvironment)
		if !ok {
			Fail("the takeover spec needs an environment that can restart vs-controller and run a second webhook (the local one); run the kind e2e with -ginkgo.label-filter='!takeover' -ginkgo.fail-on-empty, as test/kind/e2e.sh does")
		}
		tc = te.Takeover()
		n = sample(env.Names())
		// Another spec may have deleted the sample Watcher.
		w := localenv.SampleWatcher()
		w.Name, w.Namespace = n.WatcherName, n.KymaNamespace
		Expect(client.IgnoreAlreadyExists(env.KCP().Create(ctx, w))).To(Succeed())
		var err error
		lmCA, err = pki.NewCA(lmCAName)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(restoreAfterTakeover, n, tc, lmSecret, &lmHook)
	})

	It("takes over with events flowing throughout, every write reviewed by one of the two webhooks, and no LM object left", func(ctx SpecContext) {
		By("opening the trust window: LM's CA Secret in the KCP, vs-controller restarted with --migration-extra-ca-secret")
		Expect(env.KCP().Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: lmSecret.Namespace, Name: lmSecret.Name},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"ca.crt": lmCA.PEM, "tls.crt": lmCA.PEM, "tls.key": []byte("LM's CA key (not read)")},
		})).To(Succeed())
		Expect(tc.RestartController(ctx, "--migration-extra-ca-secret", lmSecret.String())).To(Succeed())
		Eventually(func(g Gomega) []string { return caNames(clientCABundle(ctx, g, n)) }).Should(ContainElement(lmCAName))

		By("staging the runtime as LM leaves it: vs-controller's bundle removed (skr-domain taken off the Kyma)")
		patchKyma(ctx, n, fmt.Sprintf(`{"metadata":{"annotations":{%q:null}}}`, contract.AnnotationSKRDomain))
		Eventually(func(g Gomega) {
			err := env.SKR().Get(ctx, client.ObjectKey{Name: bundle.Name}, &admissionregistrationv1.ValidatingWebhookConfiguration{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "webhook configuration still there: %v", err)
			err = env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, &corev1.Secret{})
			g.Expect(apierrors.IsNotFound(err)).To(BeTrue(), "Secret still there: %v", err)
			g.Expect(kymaOf(ctx, g, n).GetFinalizers()).NotTo(ContainElement(runtimes.Finalizer))
		}).WithTimeout(time.Minute).Should(Succeed())

		By("running LM's webhook and applying LM's ten SKR objects as LM does")
		// LM's webhook image cannot run here (no kubelet, no container
		// runtime): our skr-webhook binary stands in for it, with what
		// LM gives its pods — LM's certificate (CN = runtime ID, SAN =
		// skr-domain; "localhost" added as for ours, to serve the local
		// API server) and LM's managers. Its --ca-file is the gateway's
		// CA: the gateway it posts to here is ours.
		// Issued now, as a certificate LM renewed lately: the runtime had
		// vs-controller's certificates earlier in this suite, and their
		// retirement on the Kyma (kept when the bundle goes) refuses
		// anything issued before the last of them.
		leaf, err := lmCA.Issue(pki.LeafOptions{CommonName: n.RuntimeID, DNSNames: []string{n.SKRDomain, "localhost"}, NotBefore: time.Now()})
		Expect(err).NotTo(HaveOccurred())
		var gwTLS corev1.Secret
		Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.GatewayNS, Name: localenv.GatewayTLSSecret}, &gwTLS)).To(Succeed())
		lmHook, err = tc.StartWebhook(ctx, e2e.WebhookOptions{Name: "lm-skr-webhook", CertPEM: leaf.CertPEM, KeyPEM: leaf.KeyPEM,
			GatewayCAPEM: gwTLS.Data["ca.crt"], Managers: []string{n.Manager}})
		Expect(err).NotTo(HaveOccurred())
		applyLMBundle(ctx, n, lmCA, leaf, lmHook.URL())
		Expect(bundle.FindLifecycleManager(ctx, env.SKR(), bundle.Options{Namespace: n.SKRNamespace})).To(HaveLen(10))

		By("giving the Kyma its skr-domain back: vs-controller finds LM active and waits")
		patchKyma(ctx, n, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationSKRDomain, n.SKRDomain))
		Eventually(func(g Gomega) []string { return kymaEventReasons(ctx, g, n) }).Should(ContainElement(takeover.ReasonLMActive))
		takeoverDeployment := &metav1.PartialObjectMetadata{}
		takeoverDeployment.SetGroupVersionKind(bundle.DeploymentGVK)
		err = env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.TakeoverName}, takeoverDeployment)
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no take-over Deployment while LM is not stopped: %v", err)

		By("writing watched objects continuously; events flow through LM's webhook")
		objs := make([]*unstructured.Unstructured, writers)
		for i := range objs {
			objs[i] = n.watchedKyma(fmt.Sprintf("takeover-%d", i))
			Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, objs[i]))).To(Succeed())
		}
		lmBefore, ourBefore := reviews(ctx, lmHook.MetricsURL(), n.Manager), ourReviews(ctx, n)
		lmPhase := time.Now()
		w := startWriterOn(ctx, objs)
		for _, o := range objs {
			Eventually(func() []string { return runtimeIDs(received.For(n.SKRNamespace, o.GetName(), lmPhase)) }).
				Should(ContainElement(n.RuntimeID), "no event for %s through LM's webhook", o.GetName())
		}
		Expect(reviews(ctx, lmHook.MetricsURL(), n.Manager)).To(BeNumerically(">", lmBefore))

		By("stopping LM for the runtime (skip-reconciliation): vs-controller takes over")
		start := time.Now()
		patchKyma(ctx, n, fmt.Sprintf(`{"metadata":{"labels":{%q:"true"}}}`, takeover.SkipReconciliationLabel))
		Eventually(func(g Gomega) []string { return kymaEventReasons(ctx, g, n) }).WithTimeout(2 * time.Minute).
			Should(ContainElement(takeover.ReasonAdopted))
		AddReportEntry("take-over: skip-reconciliation to admission switched", time.Since(start).Round(time.Millisecond).String())
		Eventually(func(g Gomega) []string { return kymaEventReasons(ctx, g, n) }).WithTimeout(2 * time.Minute).
			Should(ContainElement(takeover.ReasonAdoptionDone))
		AddReportEntry("take-over: skip-reconciliation to completed", time.Since(start).Round(time.Millisecond).String())
		// Writes go on after the switch, now reviewed by our webhook.
		Eventually(func() float64 { return ourReviews(ctx, n) }).Should(BeNumerically(">=", ourBefore+10))

		By("stopping the writer; every final state must arrive")
		last := w.stop()
		Expect(w.errors()).To(BeEmpty(), "SKR writes failed")
		for name, at := range last {
			Eventually(func() []string { return runtimeIDs(received.For(n.SKRNamespace, name, at)) }).
				Should(ContainElement(n.RuntimeID), "the final state of %s (written %s) was not received", name, at.Format(time.RFC3339Nano))
		}

		By("checking every write against the reviews each webhook logged: each reviewed while it was made, few by both")
		spans := w.writeSpans()
		byLM, byUs := reviewTimes(lmHook.Log(), n.Manager), reviewTimes(tc.OurWebhookLog(), n.Manager)
		var gaps []string
		lmOnly, ourOnly, both := 0, 0, 0
		for _, sp := range spans {
			switch l, o := reviewedDuring(byLM[sp.name], sp), reviewedDuring(byUs[sp.name], sp); {
			case l && o:
				both++
			case l:
				lmOnly++
			case o:
				ourOnly++
			default:
				gaps = append(gaps, fmt.Sprintf("%s %s–%s", sp.name, sp.start.Format(time.RFC3339Nano), sp.end.Format(time.RFC3339Nano)))
			}
		}
		AddReportEntry("take-over: writes reviewed by LM's webhook only, by ours only, by both, by neither",
			fmt.Sprintf("%d, %d, %d, %d", lmOnly, ourOnly, both, len(gaps)))
		Expect(gaps).To(BeEmpty(), "writes no webhook reviewed (a gap in admission coverage)")
		Expect(lmOnly).To(BeNumerically(">", 0), "no write reviewed by LM's webhook alone: the writer started after the switch")
		Expect(ourOnly).To(BeNumerically(">", 0), "no write reviewed by our webhook alone")
		// Both webhooks review while both configurations are in place: our
		// webhook is added before LM's is removed (never a gap), which
		// should be a short moment, not a long overlap.
		Expect(both).To(BeNumerically("<=", max(2, len(spans)/20)), "many writes reviewed by both webhooks: the configurations overlapped for long")

		By("counting the reviews from the webhooks' metrics as well: at least one per write")
		lmCount := reviews(ctx, lmHook.MetricsURL(), n.Manager) - lmBefore
		ourCount := ourReviews(ctx, n) - ourBefore
		AddReportEntry("take-over: writes, reviews by LM's webhook, reviews by ours", fmt.Sprintf("%d, %.0f, %.0f", w.count(), lmCount, ourCount))
		Expect(lmCount).To(BeNumerically(">", 0))
		Expect(ourCount).To(BeNumerically(">", 0))
		// No gap: every write reviewed at least once. The sum may exceed
		// the writes by a few: the API server runs validating admission
		// again when it retries a patch after a storage conflict (its
		// cached copy of the object was behind the previous write), so one
		// write can be reviewed twice by the same webhook. Both webhooks
		// reviewing every write for a while (configurations overlapping
		// instead of switching) would exceed it by many.
		total := lmCount + ourCount
		Expect(total).To(BeNumerically(">=", w.count()), "a write was reviewed by no webhook (a gap)")
		Expect(total).To(BeNumerically("<=", w.count()+max(2, w.count()/20)), "many writes reviewed twice: both webhooks reviewed for a while")

		By("checking that no LM object is left in the SKR and admission is ours")
		Expect(bundle.FindLifecycleManager(ctx, env.SKR(), bundle.Options{Namespace: n.SKRNamespace})).To(BeEmpty())
		for _, name := range []string{bundle.TakeoverName, bundle.TakeoverSecretName} {
			for _, gvk := range []schema.GroupVersionKind{bundle.DeploymentGVK, bundle.SecretGVK} {
				obj := &metav1.PartialObjectMetadata{}
				obj.SetGroupVersionKind(gvk)
				err := env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: name}, obj)
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s %s left: %v", gvk.Kind, name, err)
			}
		}
		var vwc admissionregistrationv1.ValidatingWebhookConfiguration
		Expect(env.SKR().Get(ctx, client.ObjectKey{Name: bundle.Name}, &vwc)).To(Succeed())
		Expect(vwc.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))
		for _, e := range vwc.ManagedFields {
			// A later apply removes only what vs-controller's apply owns.
			Expect(e.Manager).NotTo(Equal(takeover.LMFieldManager))
			Expect(e.Operation).To(Equal(metav1.ManagedFieldsOperationApply), "field manager %s", e.Manager)
		}
		for _, wh := range vwc.Webhooks {
			Expect(wh.ClientConfig.URL).NotTo(BeNil())
			Expect(*wh.ClientConfig.URL).To(HavePrefix(tc.OurWebhookURL()), "webhook %s", wh.Name)
			Expect(caNames(certs(wh.ClientConfig.CABundle))).NotTo(ContainElement(lmCAName), "SKRs never trust LM's CA")
		}
	})
})

// restoreAfterTakeover puts the sample runtime back as the other specs
// expect it, also after a failure half-way: LM's webhook stopped and its
// objects gone, the Kyma with its skr-domain and without the
// skip-reconciliation label, vs-controller without the trust window (which
// drops LM's CA from the gateway's client CA bundle), and our webhook
// configuration in the SKR.
func restoreAfterTakeover(ctx SpecContext, n sample, tc e2e.TakeoverControls, lmSecret client.ObjectKey, lmHook *e2e.ExtraWebhook) {
	refs, err := bundle.FindLifecycleManager(ctx, env.SKR(), bundle.Options{Namespace: n.SKRNamespace})
	Expect(err).NotTo(HaveOccurred())
	for _, ref := range refs {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(ref.GVK)
		obj.SetNamespace(ref.Key.Namespace)
		obj.SetName(ref.Key.Name)
		Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, obj))).To(Succeed())
	}
	if *lmHook != nil {
		Expect((*lmHook).Stop()).To(Succeed())
	}
	patchKyma(ctx, n, fmt.Sprintf(`{"metadata":{"annotations":{%q:%q},"labels":{%q:null}}}`,
		contract.AnnotationSKRDomain, n.SKRDomain, takeover.SkipReconciliationLabel))
	Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: lmSecret.Namespace, Name: lmSecret.Name}}))).To(Succeed())
	Expect(tc.RestartController(ctx)).To(Succeed())
	Eventually(func(g Gomega) {
		g.Expect(caNames(clientCABundle(ctx, g, n))).NotTo(ContainElement("klm-watcher-selfsigned-ca"), "closing the window drops LM's CA")
		g.Expect(caBundleOf(ctx, g, n)).NotTo(BeEmpty())
		g.Expect(skrSecret(ctx, g, n).Type).To(Equal(corev1.SecretTypeTLS))
	}).WithTimeout(time.Minute).Should(Succeed())
}

// applyLMBundle applies LM's ten SKR objects (test/fixtures/lifecycle-manager/skr-bundle)
// as LM does — server-side apply, forced, field manager lifecycle-manager —
// with the fixtures' made-up PEM data replaced by this run's LM CA and
// certificate, and LM's webhook configuration built as LM builds it from
// the Watchers it sees: one webhook for the sample Watcher. The SKR API
// server here cannot reach Services, so the webhook calls LM's webhook
// process by URL (as ours does, --skr-webhook-url).
func applyLMBundle(ctx context.Context, n sample, ca *pki.CA, leaf *pki.Leaf, hookURL string) {
	GinkgoHelper()
	files, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "test", "fixtures", "lifecycle-manager", "skr-bundle", "*-rendered.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).To(HaveLen(10))
	for _, f := range files {
		for _, u := range fixtureObjects(f) {
			switch u.GetKind() {
			case "ValidatingWebhookConfiguration":
				u.SetNamespace("")
				whs, _, _ := unstructured.NestedSlice(u.Object, "webhooks")
				Expect(whs).To(HaveLen(1))
				wh := whs[0].(map[string]any)
				wh["name"] = fmt.Sprintf("%s.%s.operator.kyma-project.io", n.KymaNamespace, n.WatcherName)
				wh["objectSelector"] = map[string]any{"matchLabels": map[string]any{n.WatchedLabel: n.Manager}}
				wh["clientConfig"] = map[string]any{"url": hookURL + contract.ValidatePath(n.Manager), "caBundle": b64(ca.PEM)}
				Expect(unstructured.SetNestedSlice(u.Object, []any{wh}, "webhooks")).To(Succeed())
			case "PriorityClass":
				u.SetNamespace("")
			case "Secret":
				Expect(unstructured.SetNestedStringMap(u.Object, map[string]string{
					"ca.crt": b64(ca.PEM), "tls.crt": b64(leaf.CertPEM), "tls.key": b64(leaf.KeyPEM)}, "data")).To(Succeed())
			}
			Expect(env.SKR().Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
				client.FieldOwner(takeover.LMFieldManager), client.ForceOwnership)).To(Succeed(), f)
		}
	}
}

func fixtureObjects(file string) []*unstructured.Unstructured {
	GinkgoHelper()
	data, err := os.ReadFile(file)
	Expect(err).NotTo(HaveOccurred())
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else {
			Expect(err).NotTo(HaveOccurred(), file)
		}
		if len(doc) > 0 {
			out = append(out, &unstructured.Unstructured{Object: doc})
		}
	}
}

func patchKyma(ctx context.Context, n sample, patch string) {
	GinkgoHelper()
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	k.SetNamespace(n.KymaNamespace)
	k.SetName(n.RuntimeID)
	Expect(env.KCP().Patch(ctx, k, client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
}

func kymaOf(ctx context.Context, g Gomega, n sample) *unstructured.Unstructured {
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: n.RuntimeID}, k)).To(Succeed())
	return k
}

// kymaEventReasons are the reasons of the Events on the sample Kyma.
func kymaEventReasons(ctx context.Context, g Gomega, n sample) []string {
	uid := kymaOf(ctx, g, n).GetUID()
	var list corev1.EventList
	g.Expect(env.KCP().List(ctx, &list, client.InNamespace(n.KymaNamespace))).To(Succeed())
	var out []string
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == "Kyma" && e.InvolvedObject.UID == uid {
			out = append(out, e.Reason)
		}
	}
	return out
}

// ourReviews are the reviews of updates of the sample manager's objects the
// runtime's own skr-webhook answered. Only UPDATE: the writer's changes are
// updates, and a CREATE answered just before a count may not be counted yet
// (the webhook counts after it answered).
func ourReviews(ctx context.Context, n sample) float64 {
	GinkgoHelper()
	text, err := env.WebhookMetrics(ctx)
	Expect(err).NotTo(HaveOccurred())
	return updateReviews(text, n.Manager)
}

// reviews is the same for the webhook whose /metrics is at url.
func reviews(ctx context.Context, url, manager string) float64 {
	GinkgoHelper()
	text := fetchMetrics(ctx, url)
	Expect(text).NotTo(BeEmpty(), "no /metrics at %s", url)
	return updateReviews(text, manager)
}

// updateReviews sums runtime_watcher_skr_webhook_admission_requests_total
// of one manager's UPDATE reviews (every result: each review counts once).
func updateReviews(text, manager string) float64 {
	v, _ := promtext.Sum(text, "runtime_watcher_skr_webhook_admission_requests_total", map[string]string{"manager": manager, "operation": "UPDATE"})
	return v
}

func caNames(cas []*x509.Certificate) []string {
	out := make([]string, 0, len(cas))
	for _, c := range cas {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

// reviewTimes reads a skr-webhook log written with localenv.ReviewLogFlags
// and returns, per object name, when it answered a review of it for
// manager (the handler logs after it wrote the answer and before the
// request ends, so within the write that caused the review).
func reviewTimes(path, manager string) map[string][]time.Time {
	GinkgoHelper()
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	out := map[string][]time.Time{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var line struct {
			Msg     string `json:"msg"`
			TS      string `json:"ts"`
			Manager string `json:"manager"`
			Name    string `json:"name"`
		}
		if json.Unmarshal(sc.Bytes(), &line) != nil || line.Msg != "admission" || line.Manager != manager {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, line.TS)
		Expect(err).NotTo(HaveOccurred(), "log time %q in %s (want --zap-time-encoding=rfc3339nano)", line.TS, path)
		out[line.Name] = append(out[line.Name], t)
	}
	Expect(sc.Err()).NotTo(HaveOccurred())
	return out
}

// reviewedDuring reports whether a review time falls within the write.
func reviewedDuring(times []time.Time, sp writeSpan) bool {
	for _, t := range times {
		if !t.Before(sp.start) && !t.After(sp.end) {
			return true
		}
	}
	return false
}
