package integration_test

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// The trust window of a migration from Lifecycle Manager
// (--migration-extra-ca-secret, docs/migrating-from-lifecycle-manager.md):
// LM's CAs join the gateway's client CA bundle, and only it, while the
// flag is given; garbage in LM's CA Secret removes them (fail closed) and
// leaves ours; a vs-controller started without the flag drops them.
var _ = Describe("Trust window for Lifecycle Manager's CA", Ordered, func() {
	var (
		own      *testenv.Env
		cluster  *testenv.Cluster
		ourCA    *pki.CA
		lmCAs    []*x509.Certificate
		lmCAPEM  []byte
		clientCA = types.NamespacedName{Namespace: gatewayNS, Name: "kcp-gateway-tls-cacert"}
		lmSecret = types.NamespacedName{Namespace: gatewayNS, Name: "klm-watcher"}
		stopMgr  func()
	)

	// startManager runs vs-controller's manager with the CA rotation (and
	// so the client CA Secret) on this spec's own KCP; extra is the
	// --migration-extra-ca-secret (zero: closed).
	startManager := func(extra types.NamespacedName) func() {
		return runUntilStopped(func(ctx context.Context) error {
			mgr, err := vsmanager.New(ctx, cluster.Config, rotationOptions(trust.Options{
				CASecret:               types.NamespacedName{Namespace: kymaNS, Name: issuerName},
				GatewayClientCASecret:  clientCA,
				MigrationExtraCASecret: extra,
				Interval:               200 * time.Millisecond,
			}))
			if err != nil {
				return err
			}
			return mgr.Start(ctx)
		})
	}
	name := func(c *x509.Certificate) string { return c.Subject.CommonName + "/" + trust.Fingerprint(c) }

	BeforeAll(func(ctx SpecContext) {
		var err error
		// Its own KCP: the in-process manager of the other specs runs
		// without the CA rotation.
		own, err = testenv.Start("kcp-trust-window")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(own.Stop()).To(Succeed()) })
		cluster = own.Cluster("kcp-trust-window")
		for _, ns := range []string{kymaNS, gatewayNS} {
			Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}
		ourCA, err = pki.NewCA("runtime-watcher trust-window CA")
		Expect(err).NotTo(HaveOccurred())
		Expect(cmcontrollers.InstallCA(ctx, cluster.Client, ourCA, kymaNS, issuerName)).To(Succeed())

		// LM's CA Secret as LM's cert-manager CA Certificate leaves it
		// (test/fixtures/lifecycle-manager/pki/): its ca.crt holds the
		// made-up klm-watcher-selfsigned-ca CAs of the fixtures.
		fixture := lmObjects("skr-bundle/secret-skr-webhook-tls-rendered.yaml", "Secret")
		Expect(fixture).To(HaveLen(1))
		b64, _, _ := unstructured.NestedString(fixture[0].Object, "data", "ca.crt")
		lmCAPEM, err = base64.StdEncoding.DecodeString(b64)
		Expect(err).NotTo(HaveOccurred())
		lmCAs, err = trust.ParseBundle(lmCAPEM)
		Expect(err).NotTo(HaveOccurred())
		Expect(lmCAs).To(HaveLen(2))
		Expect(cluster.Client.Create(ctx, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: lmSecret.Namespace, Name: lmSecret.Name},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"ca.crt": lmCAPEM, "tls.crt": lmCAPEM[:len(lmCAPEM)/2], "tls.key": []byte("not read")},
		})).To(Succeed())
	})

	AfterAll(func() {
		if stopMgr != nil {
			stopMgr()
		}
	})

	It("adds LM's CAs to the gateway's client CA bundle, and nowhere else, while the flag is given", func(ctx SpecContext) {
		stopMgr = startManager(lmSecret)
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(Equal([]string{name(ourCA.Cert), name(lmCAs[0]), name(lmCAs[1])}))
		Eventually(func() float64 { return testutil.ToFloat64(vsmetrics.ClientCAExtraCAs) }).Should(BeEquivalentTo(2))
		Expect(testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues(trust.MigrationAnchorName))).To(BeEquivalentTo(1))

		// The runtime CA anchor — what SKRs are given — holds only ours.
		store := &corev1.ConfigMap{}
		Expect(cluster.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: trust.DefaultStore + "-runtime"}, store)).To(Succeed())
		held, _ := trust.ParseBundle([]byte(store.Data[trust.StoreKey]))
		Expect(held).To(HaveLen(1))
		Expect(held[0].Equal(ourCA.Cert)).To(BeTrue())
	})

	It("fails closed for LM's CAs only when their Secret turns to garbage or goes, and takes them back when it is repaired", func(ctx SpecContext) {
		s := &corev1.Secret{}
		Expect(cluster.Client.Get(ctx, lmSecret, s)).To(Succeed())
		s.Data["ca.crt"] = []byte("-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n")
		Expect(cluster.Client.Update(ctx, s)).To(Succeed())
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(Equal([]string{name(ourCA.Cert)}))
		// The pass sets the gauge after its write of the Secret returns:
		// seeing the Secret first is not a failure.
		Eventually(func() float64 { return testutil.ToFloat64(vsmetrics.ClientCAExtraCAs) }).Should(BeEquivalentTo(0))
		Expect(testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues(trust.MigrationAnchorName))).To(BeEquivalentTo(0))
		Eventually(func(g Gomega) []string {
			var list corev1.EventList
			g.Expect(cluster.Client.List(ctx, &list, client.InNamespace(lmSecret.Namespace))).To(Succeed())
			var out []string
			for _, e := range list.Items {
				if e.InvolvedObject.Kind == "Secret" && e.InvolvedObject.Name == lmSecret.Name {
					out = append(out, e.Type+"/"+e.Reason)
				}
			}
			return out
		}).Should(ContainElement(corev1.EventTypeWarning + "/" + trust.ReasonInvalidMigrationCA))

		s.Data["ca.crt"] = lmCAPEM
		Expect(cluster.Client.Update(ctx, s)).To(Succeed())
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(HaveLen(3))

		Expect(cluster.Client.Delete(ctx, s)).To(Succeed())
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(Equal([]string{name(ourCA.Cert)}))
		s.ResourceVersion = ""
		Expect(cluster.Client.Create(ctx, s)).To(Succeed())
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(HaveLen(3))
	})

	It("closes the window when vs-controller runs without the flag", func(ctx SpecContext) {
		stopMgr()
		stopMgr = startManager(types.NamespacedName{})
		Eventually(clientCABundle(ctx, cluster.Client, clientCA, name)).Should(Equal([]string{name(ourCA.Cert)}))
		Eventually(func() float64 { return testutil.ToFloat64(vsmetrics.ClientCAExtraCAs) }).Should(BeEquivalentTo(0))
	})
})
