package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
)

// Watch-path health (issue 35, docs/architecture.md §4.12): each way of
// breaking a runtime's watch path, injected into the sample runtime alone by
// acting on real objects and processes (its Secret, its webhook
// configuration, its webhook process, the answers behind the gateway), is
// flagged for that runtime only, with its cause, within two minutes; undoing
// it clears the flag, and the change made meanwhile reaches the operator (as
// its event or a resync).
//
// Timings: the health reports, silence, checks and delivery grace run at a
// third of their defaults (10 s reports, 30 s silence and checks, 20 s
// grace, 5 s rounds) so that eleven faults fit in the suite's time; the
// two-minute bound of the defaults (at most 90 s + one 10 s round) is
// proven on a fake clock by vs-controller/health's tests and
// vs-controller/bench's 10,000-runtime run.
var _ = Describe("Watch-path health", Ordered, Label("silent"), func() {
	const reportEvery = "--health-interval=10s"
	var (
		n       sample
		h       e2e.HealthControls
		others  []e2e.HealthRuntime
		watched *unstructured.Unstructured
	)

	BeforeAll(func(ctx SpecContext) {
		he, ok := env.(e2e.HealthEnvironment)
		if !ok {
			Fail("the silent specs need an environment whose runtimes can be broken (the local one); run the kind e2e with -ginkgo.label-filter='!silent', as test/kind/e2e.sh does")
		}
		h = he.Health()
		n = sample(env.Names())
		// Runtime certificates that live an hour: a renewal re-applies the
		// SKR Secret and would undo an injected certificate. The faults
		// come one after another, each a real change to be told at once:
		// no damping window (the adversary spec "Health reports under
		// attack" and vs-controller/health's tests prove the damping).
		Expect(h.RestartController(ctx, "--health-silence=30s", "--health-check-interval=30s", "--health-delivery-grace=20s",
			"--health-tick=5s", "--health-event-window=1s", "--certificate-duration=1h", "--certificate-renew-before=20m")).To(Succeed())
		Expect(h.RestartWebhook(ctx, reportEvery)).To(Succeed())
		for i := 2; i <= 3; i++ {
			rt, err := h.AddRuntime(ctx, fmt.Sprintf("runtime-%d", i), fmt.Sprintf("skr-%d.local.example.com", i), reportEvery)
			Expect(err).NotTo(HaveOccurred())
			others = append(others, rt)
		}
		pathReady(ctx, n)
		watched = n.watchedKyma("silent-watched")
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, watched))).To(Succeed())
		// Every runtime heard, none flagged.
		Eventually(func(g Gomega) {
			m, err := h.ControllerMetrics(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			heard, _ := promtext.Sum(m, "runtime_watcher_vs_controller_health_runtimes", map[string]string{"state": "heard"})
			g.Expect(heard).To(BeEquivalentTo(3))
			flagged, _ := promtext.Sum(m, "runtime_watcher_vs_controller_watch_path_flagged_runtimes", nil)
			g.Expect(flagged).To(BeZero())
		}).WithTimeout(3 * time.Minute).WithPolling(time.Second).Should(Succeed())
	}, NodeTimeout(8*time.Minute))

	AfterAll(func(ctx SpecContext) {
		// The sample runtime as the other specs know it; the further
		// runtimes' Kymas go (vs-controller removes their bundles).
		for _, rt := range others {
			k := &unstructured.Unstructured{}
			k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
			k.SetNamespace(n.KymaNamespace)
			k.SetName(rt.ID())
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, k))).To(Succeed())
		}
		Expect(h.RestartController(ctx)).To(Succeed())
		Expect(h.RestartWebhook(ctx)).To(Succeed())
	}, NodeTimeout(3*time.Minute))

	// kymaEvents are the messages of the Events of reason on runtime id's Kyma.
	kymaEvents := func(ctx context.Context, g Gomega, id, reason string) []string {
		var list corev1.EventList
		g.Expect(env.KCP().List(ctx, &list, client.InNamespace(n.KymaNamespace))).To(Succeed())
		var out []string
		for _, e := range list.Items {
			if e.InvolvedObject.Kind == "Kyma" && e.InvolvedObject.Name == id && e.Reason == reason {
				out = append(out, e.Message)
			}
		}
		return out
	}
	// recoveries counts vs-controller's flag changes to healthy.
	recoveries := func(ctx context.Context, g Gomega) float64 {
		m, err := h.ControllerMetrics(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		v, _ := promtext.Sum(m, "runtime_watcher_vs_controller_watch_path_transitions_total", map[string]string{"cause": "recovered"})
		return v
	}
	flaggedBy := func(ctx context.Context, g Gomega) map[string]float64 {
		m, err := h.ControllerMetrics(ctx)
		g.Expect(err).NotTo(HaveOccurred())
		out := map[string]float64{}
		for _, c := range health.Causes {
			if v, _ := promtext.Sum(m, "runtime_watcher_vs_controller_watch_path_flagged_runtimes", map[string]string{"cause": string(c)}); v > 0 {
				out[string(c)] = v
			}
		}
		return out
	}
	silentOnWatcher := func(ctx context.Context, g Gomega) int32 {
		var w v1beta2.Watcher
		g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: n.WatcherName}, &w)).To(Succeed())
		return w.Status.SilentRuntimes
	}
	hasPrefix := func(msgs []string, prefix string) bool {
		for _, m := range msgs {
			if strings.HasPrefix(m, prefix) {
				return true
			}
		}
		return false
	}
	// changeReached: the change made at since reached the operator, as its
	// own event or as a resync of the sample runtime.
	changeReached := func(since time.Time) bool {
		if len(received.For(n.SKRNamespace, watched.GetName(), since)) > 0 {
			return true
		}
		for _, ev := range received.For("", "", since) {
			if ev.Resync != "" && ev.RuntimeID == n.RuntimeID {
				return true
			}
		}
		return false
	}

	var (
		saved    map[string][]byte
		injected *pki.Leaf
	)
	replaceCert := func(leaf func(ctx context.Context) *pki.Leaf) func(context.Context) {
		return func(ctx context.Context) {
			sec := &corev1.Secret{}
			Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, sec)).To(Succeed())
			saved = map[string][]byte{corev1.TLSCertKey: sec.Data[corev1.TLSCertKey], corev1.TLSPrivateKeyKey: sec.Data[corev1.TLSPrivateKeyKey]}
			injected = leaf(ctx)
			sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey] = injected.CertPEM, injected.KeyPEM
			Expect(env.SKR().Update(ctx, sec)).To(Succeed())
		}
	}
	// holdCert keeps the injected certificate in the SKR's Secret while the
	// spec waits for the flag: vs-controller rightly repairs the bundle's
	// drift whenever it reconciles the runtime (every --skr-resync, 10 min,
	// and on any change of the runtime), and a repair inside the window
	// undid the fault (the rehearsal of CI: san-mismatch never flagged, the
	// runtime heard again). The spec is about a fault that persists; it
	// returns whether it had to write the certificate again.
	holdCert := func(ctx context.Context, g Gomega) bool {
		sec := &corev1.Secret{}
		g.Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, sec)).To(Succeed())
		if bytes.Equal(sec.Data[corev1.TLSCertKey], injected.CertPEM) {
			return false
		}
		sec.Data[corev1.TLSCertKey], sec.Data[corev1.TLSPrivateKeyKey] = injected.CertPEM, injected.KeyPEM
		g.Expect(env.SKR().Update(ctx, sec)).To(Succeed())
		return true
	}
	restoreCert := func(ctx context.Context) {
		sec := &corev1.Secret{}
		Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, sec)).To(Succeed())
		for k, v := range saved {
			sec.Data[k] = v
		}
		Expect(env.SKR().Update(ctx, sec)).To(Succeed())
		// The restored certificate may be older than the runtime's
		// retirement (a fault injected an older one): vs-controller then
		// asks for a new one and delivers it. Wait for that to settle —
		// the Certificate Ready and not issuing, the SKR holding what the
		// KCP's Secret holds — so it cannot overwrite the next fault.
		Eventually(func(g Gomega) {
			crt := &certmanagerv1.Certificate{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: certificates.Name(n.RuntimeID)}, crt)).To(Succeed())
			for _, c := range crt.Status.Conditions {
				g.Expect(c.Type == certmanagerv1.CertificateConditionIssuing && c.Status == cmmeta.ConditionTrue).To(BeFalse(), "the runtime's certificate is being issued")
				if c.Type == certmanagerv1.CertificateConditionReady {
					g.Expect(c.Status).To(Equal(cmmeta.ConditionTrue))
				}
			}
			kcpSec, skrSec := &corev1.Secret{}, &corev1.Secret{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: certificates.Name(n.RuntimeID)}, kcpSec)).To(Succeed())
			g.Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, skrSec)).To(Succeed())
			g.Expect(skrSec.Data[corev1.TLSCertKey]).To(Equal(kcpSec.Data[corev1.TLSCertKey]), "the SKR does not hold the KCP's current certificate yet")
		}).WithContext(ctx).WithTimeout(2 * time.Minute).WithPolling(200 * time.Millisecond).Should(Succeed())
	}
	// issue makes the injected certificate when the fault is injected: CN
	// cn ("" the sample runtime's), DNS SANs dns (nil: its skr-domain and
	// localhost), valid from and until now plus the offsets (both zero:
	// the CA's default), from the runtime CA or a foreign one.
	issue := func(cn string, dns []string, from, until time.Duration, foreign bool) func(ctx context.Context) *pki.Leaf {
		return func(ctx context.Context) *pki.Leaf {
			ca, err := h.RuntimeCA(ctx)
			Expect(err).NotTo(HaveOccurred())
			if foreign {
				ca, err = pki.NewCA("a CA the gateway never trusted")
				Expect(err).NotTo(HaveOccurred())
			}
			if cn == "" {
				cn = n.RuntimeID
			}
			if dns == nil {
				dns = []string{n.SKRDomain, "localhost"}
			}
			o := pki.LeafOptions{CommonName: cn, DNSNames: dns}
			if from != 0 || until != 0 {
				o.NotBefore, o.NotAfter = time.Now().Add(from), time.Now().Add(until)
			}
			l, err := ca.Issue(o)
			Expect(err).NotTo(HaveOccurred())
			return l
		}
	}

	var savedVWC *admissionregistrationv1.ValidatingWebhookConfiguration
	vwcKey := client.ObjectKey{Name: bundle.Name}
	onlySample := func(status int) func(r *http.Request) (int, bool) {
		return func(r *http.Request) (int, bool) {
			if r.Header.Get(contract.HeaderRuntimeID) != n.RuntimeID || !strings.HasPrefix(r.URL.Path, contract.EventPathPrefix) {
				return 0, false
			}
			return status, true
		}
	}
	delivery := func() e2e.DeliveryControls {
		de, ok := env.(e2e.DeliveryEnvironment)
		Expect(ok).To(BeTrue())
		return de.Delivery()
	}

	type fault struct {
		cause  health.Cause
		what   string
		inject func(context.Context)
		undo   func(context.Context)
		// hold, when set, puts the fault back if something repaired it
		// (reporting whether it did) while the spec waits for the flag.
		hold func(context.Context, Gomega) bool
	}
	faults := []fault{
		{health.CauseWebhookNotReady, "its skr-webhook process is killed",
			func(context.Context) { Expect(h.StopWebhook()).To(Succeed()) },
			func(ctx context.Context) { Expect(h.RestartWebhook(ctx, reportEvery)).To(Succeed()) }, nil},
		{health.CauseCertificateExpired, "its Secret gets an expired certificate",
			replaceCert(issue("", nil, -2*time.Hour, -time.Hour, false)), restoreCert, holdCert},
		{health.CauseCertificateNotYetValid, "its Secret gets a certificate valid from tomorrow",
			replaceCert(issue("", nil, 24*time.Hour, 48*time.Hour, false)), restoreCert, holdCert},
		{health.CauseCAUntrusted, "its Secret gets a certificate of a CA the gateway does not trust",
			replaceCert(issue("", nil, 0, 0, true)), restoreCert, holdCert},
		{health.CauseSANMismatch, "its Secret gets a certificate without its skr-domain",
			replaceCert(issue("", []string{"elsewhere.example.com", "localhost"}, 0, 0, false)), restoreCert, holdCert},
		{health.CauseUnknownRuntime, "its Secret gets a certificate of a runtime no Kyma names",
			replaceCert(issue("runtime-nobody-knows", nil, 0, 0, false)), restoreCert, holdCert},
		{health.CauseWebhookConfigMissing, "its ValidatingWebhookConfiguration is deleted",
			func(ctx context.Context) {
				savedVWC = &admissionregistrationv1.ValidatingWebhookConfiguration{}
				Expect(env.SKR().Get(ctx, vwcKey, savedVWC)).To(Succeed())
				Expect(env.SKR().Delete(ctx, savedVWC.DeepCopy())).To(Succeed())
			},
			func(ctx context.Context) {
				c := savedVWC.DeepCopy()
				c.ResourceVersion, c.UID, c.CreationTimestamp, c.ManagedFields = "", "", metav1.Time{}, nil
				// vs-controller may have put it back already.
				Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, c))).To(Succeed())
			}, nil},
		{health.CauseWebhookConfigAltered, "its ValidatingWebhookConfiguration's failurePolicy is changed",
			func(ctx context.Context) {
				savedVWC = &admissionregistrationv1.ValidatingWebhookConfiguration{}
				Expect(env.SKR().Get(ctx, vwcKey, savedVWC)).To(Succeed())
				c := savedVWC.DeepCopy()
				fail := admissionregistrationv1.Fail
				for i := range c.Webhooks {
					c.Webhooks[i].FailurePolicy = &fail
				}
				Expect(env.SKR().Update(ctx, c)).To(Succeed())
			},
			func(ctx context.Context) {
				c := &admissionregistrationv1.ValidatingWebhookConfiguration{}
				Expect(env.SKR().Get(ctx, vwcKey, c)).To(Succeed())
				c.Webhooks = savedVWC.Webhooks
				Expect(env.SKR().Update(ctx, c)).To(Succeed())
			}, nil},
		{health.CauseNoRoute, "its deliveries are answered 404 behind the gateway (a route not there)",
			func(context.Context) {
				Expect(delivery().SetServiceFault(onlySample(http.StatusNotFound))).To(Succeed())
			},
			func(context.Context) { Expect(delivery().SetServiceFault(nil)).To(Succeed()) }, nil},
		{health.CauseDeliveryFailing, "its deliveries are answered 503 (its operator fails)",
			func(context.Context) {
				Expect(delivery().SetServiceFault(onlySample(http.StatusServiceUnavailable))).To(Succeed())
			},
			func(context.Context) { Expect(delivery().SetServiceFault(nil)).To(Succeed()) }, nil},
		{health.CauseNothingHeard, "its webhook reaches no KCP (an address where nothing listens)",
			func(ctx context.Context) {
				Expect(h.RestartWebhook(ctx, reportEvery, "--kcp-addr", testenv.FreeAddr())).To(Succeed())
			},
			func(ctx context.Context) { Expect(h.RestartWebhook(ctx, reportEvery)).To(Succeed()) }, nil},
	}

	for i, f := range faults {
		It(fmt.Sprintf("(%d) flags %s when %s, for that runtime only, and clears it on undo without losing a change", i+1, f.cause, f.what), func(ctx SpecContext) {
			start := time.Now()
			f.inject(ctx)
			undone := false
			DeferCleanup(func(ctx SpecContext) {
				if !undone {
					f.undo(ctx)
				}
			})
			changedAt := time.Now()
			Expect(setSpec(ctx, watched, fmt.Sprintf("during-%s", f.cause))).To(Succeed())

			held := 0
			Eventually(func(g Gomega) {
				if f.hold != nil && f.hold(ctx, g) {
					held++
				}
				g.Expect(flaggedBy(ctx, g)).To(Equal(map[string]float64{string(f.cause): 1}))
				g.Expect(hasPrefix(kymaEvents(ctx, g, n.RuntimeID, health.ReasonWatchPathBroken), string(f.cause))).To(BeTrue(),
					"no %s Event naming %s on Kyma %s", health.ReasonWatchPathBroken, f.cause, n.RuntimeID)
				g.Expect(silentOnWatcher(ctx, g)).To(BeEquivalentTo(1))
			}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "%s not flagged within 2 minutes", f.cause)
			AddReportEntry(fmt.Sprintf("%s flagged after", f.cause), time.Since(start).Round(time.Second).String())
			if held > 0 {
				AddReportEntry(fmt.Sprintf("%s: the fault put back after a repair", f.cause), held)
			}
			for _, rt := range others {
				Expect(kymaEvents(ctx, Default, rt.ID(), health.ReasonWatchPathBroken)).To(BeEmpty(), "runtime %s flagged", rt.ID())
			}

			recoveredBefore := recoveries(ctx, Default)
			undoneAt := time.Now()
			f.undo(ctx)
			undone = true
			// Cleared: a change to healthy (vs-controller's transitions;
			// the events API writes the third and later repeats of an
			// Event series only every 30 minutes, so a count of Events
			// would lag). While the undone fault heals (a certificate
			// reloaded, a webhook starting) a re-diagnosis may find
			// nothing wrong any more: then the runtime recovers from
			// nothing-heard, which is the truth at that moment.
			Eventually(func(g Gomega) {
				g.Expect(flaggedBy(ctx, g)).To(BeEmpty())
				g.Expect(silentOnWatcher(ctx, g)).To(BeZero())
				g.Expect(recoveries(ctx, g)).To(BeNumerically(">", recoveredBefore))
				g.Expect(kymaEvents(ctx, g, n.RuntimeID, health.ReasonWatchPathRecovered)).NotTo(BeEmpty())
			}).WithTimeout(2*time.Minute).WithPolling(time.Second).Should(Succeed(), "%s not cleared", f.cause)
			AddReportEntry(fmt.Sprintf("%s cleared after undo in", f.cause), time.Since(undoneAt).Round(time.Second).String())
			AddReportEntry("Events on "+n.RuntimeID, fmt.Sprint(kymaEvents(ctx, Default, n.RuntimeID, health.ReasonWatchPathBroken),
				kymaEvents(ctx, Default, n.RuntimeID, health.ReasonWatchPathRecovered)))
			Eventually(func() bool { return changeReached(changedAt) }).WithTimeout(time.Minute).
				Should(BeTrue(), "the change made during %s reached the operator neither as its event nor as a resync", f.cause)
		}, NodeTimeout(6*time.Minute))
	}
})
