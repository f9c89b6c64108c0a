package integration_test

import (
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

// docs/architecture.md §4.10: a route (Gateway + /v2/<manager>/event) belongs to
// the oldest Watcher claiming it, in any namespace.
var _ = Describe("Route ownership across namespaces", Label("bounds"), func() {
	// createAfter creates w once the clock is past the creation second of
	// prev, so the two have different creationTimestamps.
	createAfter := func(ctx SpecContext, prev, w *v1beta2.Watcher) {
		GinkgoHelper()
		Eventually(func() bool {
			return time.Now().Truncate(time.Second).After(prev.CreationTimestamp.Time)
		}).WithTimeout(3 * time.Second).Should(BeTrue())
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
	}
	conflicted := func(ctx SpecContext, w *v1beta2.Watcher, owner *v1beta2.Watcher) {
		GinkgoHelper()
		key := client.ObjectKeyFromObject(w)
		Eventually(watcherStatus(ctx, key)).Should(HaveField("State", v1beta2.StateError))
		st, _ := watcherStatus(ctx, key)()
		cond := meta.FindStatusCondition(st.Conditions, routeowner.ConditionVirtualService)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal(routeowner.ReasonRouteConflict))
		Expect(cond.Message).To(ContainSubstring(owner.Namespace + "/" + owner.Name))
		Eventually(func() []string { return reasons(eventsFor(ctx, w)) }).Should(ContainElement("Warning/" + routeowner.ReasonRouteConflict))
		_, err := getVS(ctx, key)()
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no VirtualService for a later claimant")
	}
	routed := func(ctx SpecContext, w *v1beta2.Watcher) {
		GinkgoHelper()
		key := client.ObjectKeyFromObject(w)
		Eventually(watcherStatus(ctx, key)).Should(HaveField("State", v1beta2.StateReady))
		Eventually(getVS(ctx, key)).Should(HaveField("Host", w.Spec.ServiceInfo.Name+"."+w.Namespace+".svc.cluster.local"))
	}

	for _, ownerFirst := range []string{"first namespace", "second namespace"} {
		It("keeps the route with the oldest Watcher (created in the "+ownerFirst+") and hands it over when that one is deleted", func(ctx SpecContext) {
			suffix := rand.String(5)
			sel := map[string]string{"gateway-set": "shared-" + suffix}
			Expect(kcp.Client.Create(ctx, newGateway("shared-"+suffix, sel, "shared.example.com"))).To(Succeed())
			nsA, nsB := newNamespace(ctx, "owner-a"), newNamespace(ctx, "owner-b")
			if ownerFirst == "second namespace" {
				nsA, nsB = nsB, nsA
			}
			manager := "shared-operator-" + suffix
			first := newWatcher(nsA, "claim", manager, sel)
			Expect(kcp.Client.Create(ctx, first)).To(Succeed())
			routed(ctx, first)
			second := newWatcher(nsB, "claim", manager, sel)
			createAfter(ctx, first, second)
			conflicted(ctx, second, first)
			routed(ctx, first) // the owner keeps its route and stays Ready

			By("handing the route to the next claimant when the owner is deleted")
			Expect(kcp.Client.Delete(ctx, first)).To(Succeed())
			routed(ctx, second)
		})
	}

	It("lets Watchers of one manager share nothing but their own Gateways", func(ctx SpecContext) {
		suffix := rand.String(5)
		selA, selB := map[string]string{"gateway-set": "own-a-" + suffix}, map[string]string{"gateway-set": "own-b-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("own-a-"+suffix, selA, "a.example.com"))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newGateway("own-b-"+suffix, selB, "b.example.com"))).To(Succeed())
		manager := "split-operator-" + suffix
		a := newWatcher(newNamespace(ctx, "split"), "claim", manager, selA)
		b := newWatcher(newNamespace(ctx, "split"), "claim", manager, selB)
		Expect(kcp.Client.Create(ctx, a)).To(Succeed())
		Expect(kcp.Client.Create(ctx, b)).To(Succeed())
		routed(ctx, a)
		routed(ctx, b)
	})
})
