package e2e_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var (
	env      e2e.Environment
	received *collector
)

// The top-level containers (journeys, delivery, module sync, CA rotation)
// share one environment and run in Ginkgo's random order: each starts with
// pathReady and puts back what it changes, so none depends on another.
func TestE2E(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	suiteConfig, reporterConfig := GinkgoConfiguration()
	suiteConfig.LabelFilter = labelFilter(envName(), suiteConfig.LabelFilter)
	RunSpecs(t, "Runtime Watcher end to end ("+envName()+")", suiteConfig, reporterConfig)
}

// kindOnly labels the specs that need pods of real clusters (the
// e2e.ClusterEnvironment of E2E_ENV=kind), such as "kind-faults".
const kindOnly = "kind-only"

// labelFilter is the Ginkgo label filter for environment name: outside
// kind, whatever filter was given (-ginkgo.label-filter) and never a
// kind-only spec, so `make e2e` and `make test` leave them out.
func labelFilter(name, given string) string {
	if name == "kind" {
		return given
	}
	if strings.TrimSpace(given) == "" {
		return "!" + kindOnly
	}
	return "!" + kindOnly + " && (" + given + ")"
}

func envName() string {
	if n := os.Getenv("E2E_ENV"); n != "" {
		return n
	}
	return "local"
}

var _ = BeforeSuite(func(ctx SpecContext) {
	log := zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true))
	ctrl.SetLogger(log)
	var err error
	switch envName() {
	case "local":
		env, err = e2e.StartLocal(ctx, log)
	case "kind":
		env, err = e2e.ConnectKind(ctx, log)
	default:
		err = fmt.Errorf("E2E_ENV=%q: want local or kind", envName())
	}
	Expect(err).NotTo(HaveOccurred())
	received = newCollector(env.Events())
	SetDefaultEventuallyTimeout(eventuallyTimeout())
	SetDefaultEventuallyPollingInterval(50 * time.Millisecond)
}, NodeTimeout(10*time.Minute))

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// eventuallyTimeout is generous on kind, where the kubelet refreshes mounted
// Secrets only every minute or so.
func eventuallyTimeout() time.Duration {
	if envName() == "kind" {
		return 3 * time.Minute
	}
	return 30 * time.Second
}

// pathReady returns once a change in the SKR reaches the operator: it
// changes the object "path-probe" (in the SKR namespace, created when
// missing) until an event for it arrives. A container
// that broke the path on purpose leaves it being rebuilt — a webhook
// configuration vs-controller has just written again is not yet in the SKR
// API server's admission chain, and a change made in that moment is never
// reviewed (failurePolicy Ignore) — so every container that needs the path
// calls this first, instead of relying on the order of the containers.
func pathReady(ctx context.Context, n sample) {
	GinkgoHelper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.SKRNamespace}}
	Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, ns))).To(Succeed())
	probe := n.watchedKyma("path-probe")
	Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, probe))).To(Succeed())
	round := 0
	Eventually(func(g Gomega) {
		round++
		since := time.Now()
		g.Expect(setSpec(ctx, probe, fmt.Sprintf("probe-%d", round))).To(Succeed())
		g.Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, probe.GetName(), since) }).
			WithTimeout(5 * time.Second).ShouldNot(BeEmpty())
	}).WithTimeout(2*time.Minute).Should(Succeed(), "no change of %s/%s reached the operator", n.SKRNamespace, probe.GetName())
}

// collector keeps every event the operator received.
type collector struct {
	mu     sync.Mutex
	events []e2e.Event
}

func newCollector(ch <-chan e2e.Event) *collector {
	c := &collector{}
	go func() {
		for ev := range ch {
			c.mu.Lock()
			c.events = append(c.events, ev)
			c.mu.Unlock()
		}
	}()
	return c
}

// For returns the events for the SKR object namespace/name received at or
// after since.
func (c *collector) For(namespace, name string, since time.Time) []e2e.Event {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []e2e.Event
	for _, ev := range c.events {
		if ev.Namespace == namespace && ev.Name == name && !ev.Time.Before(since) {
			out = append(out, ev)
		}
	}
	return out
}

// createWatcher creates w, a Watcher of another manager than the sample's,
// and waits until its webhook is in the SKR; in an environment whose
// managers file a spec updates (e2e.ManagersFileEnvironment) the file then
// names w's manager, as the kubelet's copy of vs-controller's ConfigMap
// would. At cleanup w is deleted, its webhook leaves the SKR and the file
// is put back: the skr-webhook forgets the manager with whatever it still
// owes it (a deleted Watcher's events were otherwise retried for an hour
// and kept the webhook's queue owing, as in the e2e at 0f79661).
func createWatcher(ctx context.Context, w *v1beta2.Watcher) {
	GinkgoHelper()
	Expect(env.KCP().Create(ctx, w)).To(Succeed())
	files, hasFile := env.(e2e.ManagersFileEnvironment)
	DeferCleanup(func(ctx SpecContext) {
		Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, w))).To(Succeed())
		Eventually(func() ([]string, error) { return skrWebhooks(ctx) }).ShouldNot(ContainElement(w.WebhookName()))
		if hasFile {
			Expect(files.RestoreWebhookManagers()).To(Succeed())
		}
	})
	Eventually(func() ([]string, error) { return skrWebhooks(ctx) }).Should(ContainElement(w.WebhookName()))
	if hasFile {
		Eventually(func() ([]string, error) {
			m, err := files.SyncWebhookManagers(ctx)
			return strings.Fields(m), err
		}).Should(ContainElement(w.Spec.Manager), "vs-controller's managers ConfigMap")
	}
}

// managerWatcher is a Watcher named after its manager, in the sample's
// namespace, for Kyma CRs labelled for that manager (the sample's watched
// label), routed through the sample's gateway to service; no heartbeats.
func managerWatcher(n sample, manager string, service v1beta2.Service) *v1beta2.Watcher {
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Name: manager, Namespace: n.KymaNamespace},
		Spec: v1beta2.WatcherSpec{
			ServiceInfo:     service,
			Manager:         manager,
			LabelsToWatch:   map[string]string{n.WatchedLabel: manager},
			ResourceToWatch: v1beta2.WatchableGVR{Group: v1beta2.GroupVersion.Group, Version: "*", Resource: "kymas"},
			Field:           v1beta2.SpecField,
			Gateway: v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{"operator.kyma-project.io/watcher-gateway": "default"},
			}},
		},
	}
}
