package e2e_test

import (
	"context"
	"crypto/x509"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// Attacks from inside the KCP on vs-controller's authority (issue 24,
// docs/security.md "Threat model: the KCP"), against the real binaries:
// somebody who may write ConfigMaps in the Kyma namespace, and a Watcher
// author in another namespace.
var _ = Describe("Adversaries in the KCP", Label("adversary"), Ordered, func() {
	var n sample

	BeforeAll(func(ctx SpecContext) {
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	// postAs posts an event for the sample runtime to the gateway with
	// cert; the error of the request (a refused TLS handshake) or its
	// status.
	postAs := func(ctx context.Context, cert *pki.Leaf) (int, error) {
		c, err := cert.TLS()
		Expect(err).NotTo(HaveOccurred())
		status, _, _, err := postEvent(ctx, env.HTTPClient(&c), contract.EventPath(n.Manager), probeEvent(n, "forged-by-store-ca"))
		return status, err
	}
	has := func(cas []*x509.Certificate, c *x509.Certificate) bool {
		for _, ca := range cas {
			if ca.Equal(c) {
				return true
			}
		}
		return false
	}

	It("refuses a CA written into the trust store, after a restart of vs-controller", func(ctx SpecContext) {
		te, ok := env.(e2e.TakeoverEnvironment)
		Expect(ok).To(BeTrue(), "the environment cannot restart vs-controller")
		evil, err := pki.NewCA("store attacker CA")
		Expect(err).NotTo(HaveOccurred())
		notCA, err := evil.Issue(pki.LeafOptions{CommonName: "store attacker leaf"})
		Expect(err).NotTo(HaveOccurred())
		forged, err := evil.Issue(pki.LeafOptions{CommonName: n.RuntimeID, DNSNames: []string{n.SKRDomain}})
		Expect(err).NotTo(HaveOccurred())
		since := time.Now()

		By("writing the attacker's CA and a certificate that is no CA into both trust stores")
		stores := []string{trust.DefaultStore + "-runtime", trust.DefaultStore + "-gateway"}
		for _, s := range stores {
			cm := &corev1.ConfigMap{}
			Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: s}, cm)).To(Succeed())
			base := cm.DeepCopy() // a patch: vs-controller may write the store meanwhile
			cm.Data[trust.StoreKey] += string(evil.PEM) + string(notCA.CertPEM)
			Expect(env.KCP().Patch(ctx, cm, client.MergeFrom(base))).To(Succeed())
		}

		By("restarting vs-controller on the poisoned stores")
		Expect(te.Takeover().RestartController(ctx)).To(Succeed())
		for _, s := range stores {
			Eventually(func(g Gomega) bool {
				cm := &corev1.ConfigMap{}
				g.Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: n.KymaNamespace, Name: s}, cm)).To(Succeed())
				return has(certs([]byte(cm.Data[trust.StoreKey])), evil.Cert)
			}).Should(BeFalse(), "vs-controller rewrites the store %s without the attacker's CA", s)
		}
		// The runtime is served after the restart: a change reaches the
		// operator, so the bundles below are those of the restarted
		// vs-controller.
		pathReady(ctx, n)
		Eventually(func(g Gomega) {
			g.Expect(has(clientCABundle(ctx, g, n), evil.Cert)).To(BeFalse(), "gateway client CA")
			g.Expect(has(caBundleOf(ctx, g, n), evil.Cert)).To(BeFalse(), "SKR caBundle")
			g.Expect(has(skrGatewayBundle(ctx, g, n), evil.Cert)).To(BeFalse(), "SKR ca.crt")
			g.Expect(clientCABundle(ctx, g, n)).NotTo(BeEmpty())
		}).Should(Succeed())

		By("posting with a certificate the attacker's CA minted for the runtime")
		status, err := postAs(ctx, forged)
		Expect(err).To(HaveOccurred(), "the gateway answered %d to a certificate of the attacker's CA", status)
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, "forged-by-store-ca", since) }, quietPeriod).Should(BeEmpty())
	})

	// Issue 33: a copy of the runtime trust store saved before a rotation,
	// with its then valid seals, was written back after the old CA was
	// retired; on restart vs-controller re-admitted the old CA and kept it
	// while any runtime's state was unknown (the seal had no epoch). Now a
	// seal is bound to the store's epoch, which the retirement advanced.
	It("refuses a retired CA written back into the trust store, also while a runtime's state is unknown", func(ctx SpecContext) {
		te, ok := env.(e2e.TakeoverEnvironment)
		Expect(ok).To(BeTrue(), "the environment cannot restart vs-controller")
		store := client.ObjectKey{Namespace: n.KymaNamespace, Name: trust.DefaultStore + "-runtime"}
		storeHolds := func(g Gomega, ca *x509.Certificate) bool {
			cm := &corev1.ConfigMap{}
			g.Expect(env.KCP().Get(ctx, store, cm)).To(Succeed())
			return has(certs([]byte(cm.Data[trust.StoreKey])), ca)
		}

		By("saving the store while it holds the current runtime CA")
		saved := &corev1.ConfigMap{}
		Expect(env.KCP().Get(ctx, store, saved)).To(Succeed())

		By("rotating the runtime CA until the old one is retired everywhere")
		oldCA, newCA := rotateCA(ctx, n.KymaNamespace, "runtime-watcher-ca")
		Expect(has(certs([]byte(saved.Data[trust.StoreKey])), oldCA)).To(BeTrue(), "the saved store holds the CA before the rotation")
		Eventually(func(g Gomega) {
			g.Expect(storeHolds(g, oldCA)).To(BeFalse(), "the trust store")
			g.Expect(has(caBundleOf(ctx, g, n), oldCA)).To(BeFalse(), "SKR caBundle")
			g.Expect(has(clientCABundle(ctx, g, n), oldCA)).To(BeFalse(), "gateway client CA")
			g.Expect(has(clientCABundle(ctx, g, n), newCA)).To(BeTrue(), "gateway client CA")
		}).WithTimeout(3*time.Minute).Should(Succeed(), "the old runtime CA was not retired")

		By("adding a runtime whose state is unknown (unreachable): it holds every CA the store remembers")
		secret, kyma := unreachableRuntime("e2e-unknown-state")
		Expect(env.KCP().Create(ctx, secret)).To(Succeed())
		Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, secret))).To(Succeed())
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, kyma))).To(Succeed())
			Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(kyma), kyma.DeepCopy()) }).
				WithTimeout(time.Minute).Should(Satisfy(apierrors.IsNotFound))
		})

		By("writing the saved store back while vs-controller is stopped, and starting it on that store")
		Expect(te.Takeover().RestartControllerAfter(ctx, func(ctx context.Context) error {
			cm := &corev1.ConfigMap{}
			if err := env.KCP().Get(ctx, store, cm); err != nil {
				return err
			}
			cm.Data, cm.BinaryData = saved.Data, saved.BinaryData
			return env.KCP().Update(ctx, cm)
		})).To(Succeed())
		pathReady(ctx, n)

		By("checking that the retired CA stays out of the store and every bundle")
		Eventually(func(g Gomega) {
			g.Expect(storeHolds(g, oldCA)).To(BeFalse(), "the trust store after the restart")
		}).Should(Succeed(), "vs-controller re-admitted the replayed CA")
		Consistently(func(g Gomega) {
			g.Expect(storeHolds(g, oldCA)).To(BeFalse(), "the trust store")
			g.Expect(has(caBundleOf(ctx, g, n), oldCA)).To(BeFalse(), "SKR caBundle")
			g.Expect(has(clientCABundle(ctx, g, n), oldCA)).To(BeFalse(), "gateway client CA")
		}, 5*time.Second).Should(Succeed())
	})

	It("gives a Watcher that lost its manager's route no webhook in the runtime", func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-x-"}}
		Expect(env.KCP().Create(ctx, ns)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, ns))).To(Succeed()) })
		// The sample Watcher owns the route of n.Manager on the gateway;
		// this one claims it too, watching every write in the runtime.
		thief := localenv.SampleWatcher()
		thief.Namespace, thief.Name = ns.Name, "everything"
		thief.Spec.ResourceToWatch = v1beta2.WatchableGVR{Group: "*", Version: "*", Resource: "*"}
		thief.Spec.LabelsToWatch = nil
		Expect(env.KCP().Create(ctx, thief)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, thief))).To(Succeed()) })
		Eventually(func(g Gomega) {
			w := &v1beta2.Watcher{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(thief), w)).To(Succeed())
			c := meta.FindStatusCondition(w.Status.Conditions, routeowner.ConditionVirtualService)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal(routeowner.ReasonRouteConflict))
			g.Expect(c.Message).To(ContainSubstring("no webhook in any runtime"))
		}).Should(Succeed())

		// A Watcher change after the thief's: once its webhook is in the
		// runtime, the runtime was given the Watchers with the thief.
		later := localenv.SampleWatcher()
		later.Namespace, later.Name = ns.Name, "later"
		later.Spec.Manager = "later-operator"
		createWatcher(ctx, later)
		Expect(skrWebhooks(ctx)).To(And(ContainElement(n.KymaNamespace+"."+n.WatcherName+".operator.kyma-project.io"), Not(ContainElement(thief.WebhookName()))))

		By("writing an object only the thief's rules would match")
		since := time.Now()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: n.SKRNamespace, Name: "adversary-unwatched"}}
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, cm))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, cm))).To(Succeed()) })
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, cm.Name, since) }, quietPeriod).Should(BeEmpty())
		pathReady(ctx, n)
	})

	// Issue 33: the loser writes watchers/status (anyone whose RBAC covers
	// resources "*" of the group can) and claims VirtualServiceReady=True
	// for its generation. Whether it holds a route comes from
	// vs-controller's VirtualServices; the condition is put back.
	It("gives a Watcher that lost its route no webhook when it forges its own status, and puts the status back", func(ctx SpecContext) {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "team-f-"}}
		Expect(env.KCP().Create(ctx, ns)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, ns))).To(Succeed()) })
		thief := localenv.SampleWatcher()
		thief.Namespace, thief.Name = ns.Name, "forger"
		thief.Spec.ResourceToWatch = v1beta2.WatchableGVR{Group: "*", Version: "*", Resource: "*"}
		thief.Spec.LabelsToWatch = nil
		Expect(env.KCP().Create(ctx, thief)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, thief))).To(Succeed()) })
		conflict := func(g Gomega) {
			w := &v1beta2.Watcher{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(thief), w)).To(Succeed())
			c := meta.FindStatusCondition(w.Status.Conditions, routeowner.ConditionVirtualService)
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
			g.Expect(c.Reason).To(Equal(routeowner.ReasonRouteConflict))
		}
		Eventually(conflict).Should(Succeed())

		By("forging VirtualServiceReady=True for the current generation, again and again")
		forge := func(ctx context.Context) error {
			w := &v1beta2.Watcher{}
			if err := env.KCP().Get(ctx, client.ObjectKeyFromObject(thief), w); err != nil {
				return err
			}
			base := w.DeepCopy()
			meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionTrue,
				Reason: routeowner.ReasonApplied, Message: "forged", ObservedGeneration: w.Generation})
			w.Status.State = v1beta2.StateReady
			return env.KCP().Status().Patch(ctx, w, client.MergeFrom(base))
		}
		Expect(forge(ctx)).To(Succeed())
		forging, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for forging.Err() == nil {
				_ = forge(forging) // vs-controller puts it back; the forger insists
			}
		}()
		DeferCleanup(func() {
			stop()
			<-done
		})
		// A runtime pass after the forgery (another Watcher's change).
		later := localenv.SampleWatcher()
		later.Namespace, later.Name = ns.Name, "after-forgery"
		later.Spec.Manager = "after-forgery-operator"
		createWatcher(ctx, later)
		Consistently(func() ([]string, error) { return skrWebhooks(ctx) }, quietPeriod).Should(Not(ContainElement(thief.WebhookName())))
		stop()
		<-done
		Eventually(conflict).Should(Succeed())

		By("writing an object only the forger's rules would match")
		since := time.Now()
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: n.SKRNamespace, Name: "adversary-forged"}}
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, cm))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, cm))).To(Succeed()) })
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, cm.Name, since) }, quietPeriod).Should(BeEmpty())
		pathReady(ctx, n)
	})
})
