package integration_test

import (
	"context"
	"crypto/x509"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// Issue 24: the trust store ConfigMaps in the Kyma namespace remember the
// CAs vs-controller saw in the CA Secrets; they never add one
// (docs/certificates.md, "The trust store"). Somebody who may write
// ConfigMaps there writes an extra CA and a certificate that is no CA into
// both stores; vs-controller restarts (every runtime's SKR state unknown,
// so every remembered CA counts as in use). Neither the gateway's client CA
// bundle nor what the runtime is given (its Secret's ca.crt, the webhooks'
// caBundle) holds them, and a client certificate that CA minted for the
// runtime does not verify against the client CA bundle.
var _ = Describe("Poisoned trust store", Label("adversary"), Ordered, func() {
	const runtimeID = "poison-runtime"
	var (
		own                 *testenv.Env
		cluster             *testenv.Cluster
		runtimeCA, gwCA     *pki.CA
		evil                *pki.CA
		notCA               *pki.Leaf
		clientCA            = types.NamespacedName{Namespace: gatewayNS, Name: "kcp-gateway-tls-cacert"}
		gatewayCASecret     = types.NamespacedName{Namespace: gatewayNS, Name: "kcp-gateway-ca"}
		stores              = []string{trust.DefaultStore + "-runtime", trust.DefaultStore + "-gateway"}
		stopMgr, stopIssuer func()
	)

	startManager := func() func() {
		return runUntilStopped(func(ctx context.Context) error {
			opts := rotationOptions(trust.Options{
				CASecret:              types.NamespacedName{Namespace: kymaNS, Name: issuerName},
				GatewayCASecret:       gatewayCASecret,
				GatewayClientCASecret: clientCA,
				Interval:              200 * time.Millisecond,
			})
			opts.SKRTimeout, opts.WatcherDebounce, opts.KubeconfigRetry = 3*time.Second, 50*time.Millisecond, time.Second
			mgr, err := vsmanager.New(ctx, cluster.Config, opts)
			if err != nil {
				return err
			}
			return mgr.Start(ctx)
		})
	}
	commonName := func(c *x509.Certificate) string { return c.Subject.CommonName }
	names := func(certs []*x509.Certificate) []string {
		out := []string{}
		for _, c := range certs {
			out = append(out, commonName(c))
		}
		return out
	}
	storeHolds := func(ctx context.Context, name string) func(Gomega) []string {
		return func(g Gomega) []string {
			cm := &corev1.ConfigMap{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: name}, cm)).To(Succeed())
			cs, _ := trust.ParseBundle([]byte(cm.Data[trust.StoreKey]))
			return names(cs)
		}
	}
	// runtimeAnchors: the gateway CAs in the runtime's Secret (ca.crt) and
	// the runtime CAs in its webhooks' caBundle.
	runtimeAnchors := func(ctx context.Context) func(Gomega) []string {
		return func(g Gomega) []string {
			s := &corev1.Secret{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, s)).To(Succeed())
			gw, _ := trust.ParseBundle(s.Data[certificates.KeyCA])
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			g.Expect(cluster.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
			g.Expect(vwc.Webhooks).NotTo(BeEmpty())
			out := names(gw)
			for _, h := range vwc.Webhooks {
				rt, _ := trust.ParseBundle(h.ClientConfig.CABundle)
				out = append(out, names(rt)...)
			}
			return out
		}
	}

	BeforeAll(func(ctx SpecContext) {
		var err error
		// Its own API server, the KCP and the runtime's cluster at once:
		// the suite's manager runs without the CA rotation.
		own, err = testenv.Start("kcp-poisoned-store")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(own.Stop()).To(Succeed()) })
		cluster = own.Cluster("kcp-poisoned-store")
		for _, ns := range []string{kymaNS, gatewayNS} {
			Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
		runtimeCA, err = pki.NewCA("runtime CA")
		Expect(err).NotTo(HaveOccurred())
		Expect(cmcontrollers.InstallCA(ctx, cluster.Client, runtimeCA, kymaNS, issuerName)).To(Succeed())
		gwCA, err = pki.NewCA("gateway CA")
		Expect(err).NotTo(HaveOccurred())
		Expect(cmcontrollers.InstallCA(ctx, cluster.Client, gwCA, gatewayCASecret.Namespace, gatewayCASecret.Name)).To(Succeed())
		evil, err = pki.NewCA("attacker CA")
		Expect(err).NotTo(HaveOccurred())
		notCA, err = evil.Issue(pki.LeafOptions{CommonName: "not a CA"})
		Expect(err).NotTo(HaveOccurred())
		// cert-manager's own controllers issue this cluster's certificates.
		stopIssuer = runUntilStopped(func(ctx context.Context) error {
			return cmcontrollers.Run(ctx, cmcontrollers.Options{Kubeconfig: cluster.KubeconfigPath, Log: ctrl.Log.WithName("cert-manager-poisoned-store")})
		})

		Expect(cluster.Client.Create(ctx, newWatcher(kymaNS, "first", "first-operator", map[string]string{"x": "y"}))).To(Succeed())
		Expect(cluster.Client.Create(ctx, kubeconfigSecret(runtimeID, kubeconfigOf(cluster)))).To(Succeed())
		Expect(cluster.Client.Create(ctx, newKyma("poison-kyma", runtimeID, "poison.skr.example.com"))).To(Succeed())
	})

	AfterAll(func() {
		if stopMgr != nil {
			stopMgr()
		}
		if stopIssuer != nil {
			stopIssuer()
		}
	})

	It("keeps the CAs out of every bundle after a restart on a poisoned store", func(ctx SpecContext) {
		stopMgr = startManager()
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, commonName)).Should(Equal([]string{"runtime CA"}))
		Eventually(runtimeAnchors(ctx)).Should(Equal([]string{"gateway CA", "runtime CA"}))
		for _, s := range stores {
			Eventually(storeHolds(ctx, s)).Should(HaveLen(1))
		}
		stopMgr()
		stopMgr = nil

		By("writing an extra CA and a certificate that is no CA into both stores")
		for _, s := range stores {
			cm := &corev1.ConfigMap{}
			Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: s}, cm)).To(Succeed())
			cm.Data[trust.StoreKey] += string(evil.PEM) + string(notCA.CertPEM)
			Expect(cluster.Client.Update(ctx, cm)).To(Succeed())
		}
		refused := testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("runtime")) +
			testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("gateway"))

		By("restarting vs-controller: no runtime's SKR state is known")
		stopMgr = startManager()
		for _, s := range stores {
			Eventually(storeHolds(ctx, s)).ShouldNot(ContainElements("attacker CA"), "the store is rewritten without them")
		}
		Eventually(func() float64 {
			return testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("runtime")) +
				testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("gateway")) - refused
		}).Should(BeEquivalentTo(4))
		Expect(clientCABundle(ctx, cluster.Client, clientCA, commonName)(Gomega(Default))).To(Equal([]string{"runtime CA"}))

		// A pass over the runtime after the restart (a new Watcher's
		// webhook arrives) gives it the bundles without them.
		Expect(cluster.Client.Create(ctx, newWatcher(kymaNS, "second", "second-operator", map[string]string{"x": "y"}))).To(Succeed())
		Eventually(func() ([]string, error) {
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := cluster.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
				return nil, err
			}
			var out []string
			for _, h := range vwc.Webhooks {
				out = append(out, h.Name)
			}
			return out, nil
		}).Should(ContainElement(kymaNS + ".second.operator.kyma-project.io"))
		Expect(runtimeAnchors(ctx)(Gomega(Default))).To(Equal([]string{"gateway CA", "runtime CA", "runtime CA"}))
		Expect(clientCABundle(ctx, cluster.Client, clientCA, commonName)(Gomega(Default))).To(Equal([]string{"runtime CA"}))

		By("verifying a client certificate the attacker's CA minted for the runtime against the client CA bundle")
		s := &corev1.Secret{}
		Expect(cluster.Client.Get(ctx, clientCA, s)).To(Succeed())
		pool := x509.NewCertPool()
		Expect(pool.AppendCertsFromPEM(s.Data["ca.crt"])).To(BeTrue())
		opts := x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
		forged, err := evil.Issue(pki.LeafOptions{CommonName: runtimeID})
		Expect(err).NotTo(HaveOccurred())
		_, err = forged.Cert.Verify(opts)
		Expect(err).To(HaveOccurred(), "a certificate of the attacker's CA verifies")
		genuine, err := runtimeCA.Issue(pki.LeafOptions{CommonName: runtimeID})
		Expect(err).NotTo(HaveOccurred())
		_, err = genuine.Cert.Verify(opts)
		Expect(err).NotTo(HaveOccurred(), "the runtime CA's certificates still verify")
	})
})
