package e2e_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// kymaManager is the manager (and Watcher, and Service) of the operator on
// Kyma's listener.
const kymaManager = "kyma-listener"

// An operator built on Kyma's own listener (github.com/kyma-project/runtime-watcher/listener
// v1.4.3, unchanged: test/tools/kymalistener) behind our edge — SKR API
// server, skr-webhook, gateway with ext-authz, a VirtualService from its
// Watcher — gets exactly what docs/migrating-from-lifecycle-manager.md
// ("Operators on Kyma's listener") says: a change as that object and GVK with
// the runtime ID from the client certificate's CN; a resync and a heartbeat
// as the same ordinary event with an empty object and GVK, the marker gone.
var _ = Describe("An operator on Kyma's listener v1.4.3", Label("kyma-listener"), func() {
	It("gets changes with the runtime ID from the certificate's CN, a startup resync, and heartbeats only once its Watcher opts in, as ordinary events", func(ctx SpecContext) {
		kenv, ok := env.(e2e.KymaListenerEnvironment)
		if !ok {
			Fail("the " + envName() + " environment cannot run an operator on Kyma's listener (e2e.sh's label filter leaves kyma-listener out on kind)")
		}
		n := sample(env.Names())
		pathReady(ctx, n)

		By("the runtime ID Kyma's listener must report: the CN of the webhook's client certificate")
		cn := webhookCertCN(ctx, n)
		Expect(cn).To(Equal(n.RuntimeID), "our certificates have CN = runtime ID")

		By("starting the operator on Kyma's listener and its Watcher (no heartbeats)")
		op, err := kenv.StartKymaOperator(ctx, kymaManager, kymaManager)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(op.Stop(ctx)).To(Succeed()) })
		got := newKymaCollector(op.Events())
		w := kymaWatcher(n)
		Expect(env.KCP().Create(ctx, w)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, w))).To(Succeed())
			// Its webhook gone first: the file put back then makes the
			// skr-webhook forget the manager for good.
			Eventually(func() ([]string, error) { return skrWebhooks(ctx) }).ShouldNot(ContainElement(w.WebhookName()))
			Expect(kenv.RestoreWebhookManagers()).To(Succeed())
		})

		By("a startup resync once the webhook learns the manager: an ordinary event, empty object and GVK, runtime ID = CN")
		since := time.Now()
		syncManagers := func(line string) {
			GinkgoHelper()
			Eventually(func() ([]string, error) {
				m, err := kenv.SyncWebhookManagers(ctx)
				return strings.Split(m, "\n"), err
			}).Should(ContainElement(line), "vs-controller's managers ConfigMap")
		}
		syncManagers(kymaManager)
		Eventually(func() int { return len(got.empty(since)) }).WithTimeout(time.Minute).
			Should(BeNumerically(">=", 1), "no resync reached the operator on Kyma's listener (its log: %s)", op.Log())
		expectKymaContent(got.empty(since)[0], "", "", metav1.GroupVersionKind{}, cn)
		// One resync per manager learnt; no heartbeats without opting in
		// (the webhook sends them every second here).
		Consistently(func() int { return len(got.empty(since)) }).WithTimeout(3*time.Second).Should(Equal(1),
			"more than the one resync although the Watcher has no spec.heartbeats")

		By("a change of a Kyma its Watcher selects: that object and GVK, runtime ID = CN")
		kyma := n.watchedKyma("kyma-listener-probe")
		kyma.SetLabels(map[string]string{n.WatchedLabel: kymaManager})
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, kyma))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, kyma))).To(Succeed()) })
		// The SKR API server calls the new Watcher's webhook only once
		// vs-controller's configuration reached its admission chain: change
		// until a change arrives.
		round := 0
		Eventually(func(g Gomega) {
			round++
			from := time.Now()
			g.Expect(setSpec(ctx, kyma, fmt.Sprintf("kyma-%d", round))).To(Succeed())
			g.Eventually(func() []e2e.KymaEvent { return got.object(n.SKRNamespace, kyma.GetName(), from) }).
				WithTimeout(5 * time.Second).ShouldNot(BeEmpty())
		}).WithTimeout(2*time.Minute).Should(Succeed(), "no change reached the operator on Kyma's listener (its log: %s)", op.Log())
		expectKymaContent(got.object(n.SKRNamespace, kyma.GetName(), time.Time{})[0], n.SKRNamespace, kyma.GetName(),
			metav1.GroupVersionKind(v1beta2.KymaGroupVersionKind), cn)

		By("heartbeats once the Watcher sets spec.heartbeats: the same ordinary empty event every interval")
		Expect(env.KCP().Patch(ctx, w, client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"heartbeats":true}}`)))).To(Succeed())
		since = time.Now()
		syncManagers(kymaManager + " " + contract.ManagerHeartbeats)
		Eventually(func() int { return len(got.empty(since)) }).WithTimeout(time.Minute).
			Should(BeNumerically(">=", 3), "no heartbeats reached the operator on Kyma's listener (its log: %s)", op.Log())
		for _, ev := range got.empty(since) {
			expectKymaContent(ev, "", "", metav1.GroupVersionKind{}, cn)
		}
	})
})

// kymaWatcher is the Watcher of the operator on Kyma's listener: Kyma CRs
// labelled for kymaManager, through the sample's gateway, no heartbeats
// (as Lifecycle Manager's Watchers).
func kymaWatcher(n sample) *v1beta2.Watcher {
	return managerWatcher(n, kymaManager, v1beta2.Service{Name: kymaManager, Namespace: n.KymaNamespace, Port: e2e.KymaOperatorPort})
}

// webhookCertCN is the CN of the client certificate the runtime's webhook
// presents at the gateway.
func webhookCertCN(ctx context.Context, n sample) string {
	GinkgoHelper()
	var sec corev1.Secret
	Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, &sec)).To(Succeed())
	block, _ := pem.Decode(sec.Data[corev1.TLSCertKey])
	Expect(block).NotTo(BeNil(), "no PEM in the webhook's %s", corev1.TLSCertKey)
	cert, err := x509.ParseCertificate(block.Bytes)
	Expect(err).NotTo(HaveOccurred())
	return cert.Subject.CommonName
}

// expectKymaContent checks one event's content exactly as Kyma's listener
// builds it (event.UnstructuredContent): three keys, watched a
// types.NamespacedName, watched-gvk a metav1.GroupVersionKind, runtime-id a
// string — and nothing else (no resync or heartbeat marker).
func expectKymaContent(ev e2e.KymaEvent, namespace, name string, gvk metav1.GroupVersionKind, runtimeID string) {
	GinkgoHelper()
	Expect(ev.Content).To(HaveLen(3), "content keys: %v", keysOf(ev.Content))
	Expect(ev.Content).To(HaveKey("watched"))
	Expect(ev.Content).To(HaveKey("watched-gvk"))
	Expect(ev.Content).To(HaveKey("runtime-id"))
	Expect(ev.Content["watched"].Type).To(Equal("types.NamespacedName"))
	Expect(ev.Content["watched-gvk"].Type).To(Equal("v1.GroupVersionKind"))
	Expect(ev.Content["runtime-id"].Type).To(Equal("string"))
	var watched struct{ Namespace, Name string }
	Expect(json.Unmarshal(ev.Content["watched"].Value, &watched)).To(Succeed())
	Expect(watched.Namespace).To(Equal(namespace))
	Expect(watched.Name).To(Equal(name))
	var gotGVK metav1.GroupVersionKind
	Expect(json.Unmarshal(ev.Content["watched-gvk"].Value, &gotGVK)).To(Succeed())
	Expect(gotGVK).To(Equal(gvk))
	var id string
	Expect(json.Unmarshal(ev.Content["runtime-id"].Value, &id)).To(Succeed())
	Expect(id).To(Equal(runtimeID))
}

func keysOf(m map[string]e2e.KymaEventItem) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// kymaCollector keeps every event the operator on Kyma's listener received.
type kymaCollector struct {
	mu     sync.Mutex
	events []e2e.KymaEvent
}

func newKymaCollector(ch <-chan e2e.KymaEvent) *kymaCollector {
	c := &kymaCollector{}
	go func() {
		for ev := range ch {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
	}()
	return c
}

// watched is an event's watched object (zero if it has none as JSON).
func watchedOf(ev e2e.KymaEvent) (namespace, name string) {
	var w struct{ Namespace, Name string }
	_ = json.Unmarshal(ev.Content["watched"].Value, &w)
	return w.Namespace, w.Name
}

// empty returns the events at or after since whose watched object is
// empty: resyncs and heartbeats, as Kyma's listener hands them on.
func (c *kymaCollector) empty(since time.Time) []e2e.KymaEvent { return c.object("", "", since) }

// object returns the events for namespace/name at or after since.
func (c *kymaCollector) object(namespace, name string, since time.Time) []e2e.KymaEvent {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []e2e.KymaEvent
	for _, ev := range c.events {
		if ns, nm := watchedOf(ev); ns == namespace && nm == name && !ev.Time.Before(since) {
			out = append(out, ev)
		}
	}
	return out
}
