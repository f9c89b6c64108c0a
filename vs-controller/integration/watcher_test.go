package integration_test

import (
	"context"
	"sort"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// vsView is what a test checks of a VirtualService.
type vsView struct {
	Gateways, Hosts []string
	Prefix, Host    string
	Port            uint32
	Routes          int
}

func viewOf(vs *istionetworkingv1.VirtualService) vsView {
	v := vsView{Gateways: vs.Spec.Gateways, Hosts: vs.Spec.Hosts, Routes: len(vs.Spec.Http)}
	if len(vs.Spec.Http) > 0 && len(vs.Spec.Http[0].Match) > 0 && len(vs.Spec.Http[0].Route) > 0 {
		v.Prefix = vs.Spec.Http[0].Match[0].GetUri().GetPrefix()
		v.Host = vs.Spec.Http[0].Route[0].GetDestination().GetHost()
		v.Port = vs.Spec.Http[0].Route[0].GetDestination().GetPort().GetNumber()
	}
	return v
}

func newVS() *istionetworkingv1.VirtualService { return &istionetworkingv1.VirtualService{} }

func getVS(ctx context.Context, key client.ObjectKey) func() (vsView, error) {
	return func() (vsView, error) {
		vs := &istionetworkingv1.VirtualService{}
		if err := kcp.Client.Get(ctx, key, vs); err != nil {
			return vsView{}, err
		}
		return viewOf(vs), nil
	}
}

func watcherStatus(ctx context.Context, key client.ObjectKey) func() (v1beta2.WatcherStatus, error) {
	return func() (v1beta2.WatcherStatus, error) {
		w := &v1beta2.Watcher{}
		err := kcp.Client.Get(ctx, key, w)
		return w.Status, err
	}
}

var _ = Describe("Watcher → VirtualService", func() {
	var (
		ns     string
		suffix string
	)
	BeforeEach(func(ctx SpecContext) {
		ns = newNamespace(ctx, "watchers")
		suffix = rand.String(5)
	})

	It("routes the manager's events from the selected Gateways to the listener Service", func(ctx SpecContext) {
		sel := map[string]string{"gateway-set": "shape-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("shape-a-"+suffix, sel, "b.example.com", "a.example.com"))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newGateway("shape-b-"+suffix, sel, "a.example.com", "c.example.com"))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newGateway("shape-other-"+suffix, nil, "other.example.com"))).To(Succeed())
		w := newWatcher(ns, "shape", "shape-operator", sel)
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)

		Eventually(getVS(ctx, key)).Should(Equal(vsView{
			Gateways: []string{gatewayNS + "/shape-a-" + suffix, gatewayNS + "/shape-b-" + suffix},
			Hosts:    []string{"a.example.com", "b.example.com", "c.example.com"},
			Prefix:   "/v2/shape-operator/event",
			Host:     "shape-operator-event-service." + ns + ".svc.cluster.local",
			Port:     8082,
			Routes:   1,
		}))

		vs := &istionetworkingv1.VirtualService{}
		Expect(kcp.Client.Get(ctx, key, vs)).To(Succeed())
		Expect(kcp.Client.Get(ctx, key, w)).To(Succeed())
		Expect(metav1.IsControlledBy(vs, w)).To(BeTrue(), "owner reference to the Watcher")
		Expect(w.Finalizers).To(ContainElement(routing.Finalizer))
		Expect(vs.ManagedFields).To(ContainElement(And(
			HaveField("Manager", diffapply.FieldOwner), HaveField("Operation", metav1.ManagedFieldsOperationApply))),
			"written with server-side apply by the field owner")

		Eventually(watcherStatus(ctx, key)).Should(And(
			HaveField("State", v1beta2.StateReady),
			HaveField("ObservedGeneration", w.Generation),
		))
		st, _ := watcherStatus(ctx, key)()
		cond := meta.FindStatusCondition(st.Conditions, routeowner.ConditionVirtualService)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))
		Expect(cond.ObservedGeneration).To(Equal(w.Generation))

		By("making no writes when a reconcile finds everything up to date")
		Expect(kcp.Client.Get(ctx, key, vs)).To(Succeed())
		Expect(kcp.Client.Get(ctx, key, w)).To(Succeed())
		vsRV, wRV := vs.ResourceVersion, w.ResourceVersion
		before := testutil.ToFloat64(vsmetrics.VirtualServiceReconciles.WithLabelValues("unchanged"))
		gw := &istionetworkingv1.Gateway{}
		Expect(kcp.Client.Get(ctx, client.ObjectKey{Namespace: gatewayNS, Name: "shape-a-" + suffix}, gw)).To(Succeed())
		gw.Labels["unrelated"] = "touch" // still selected: triggers a reconcile of the Watcher
		Expect(kcp.Client.Update(ctx, gw)).To(Succeed())
		Eventually(func() float64 {
			return testutil.ToFloat64(vsmetrics.VirtualServiceReconciles.WithLabelValues("unchanged"))
		}).Should(BeNumerically(">", before))
		Expect(kcp.Client.Get(ctx, key, vs)).To(Succeed())
		Expect(kcp.Client.Get(ctx, key, w)).To(Succeed())
		Expect(vs.ResourceVersion).To(Equal(vsRV))
		Expect(w.ResourceVersion).To(Equal(wRV))
	})

	It("reports Error while no Gateway matches and recovers when one appears", func(ctx SpecContext) {
		sel := map[string]string{"gateway-set": "late-" + suffix}
		w := newWatcher(ns, "late", "late-operator", sel)
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)

		Eventually(watcherStatus(ctx, key)).Should(HaveField("State", v1beta2.StateError))
		st, _ := watcherStatus(ctx, key)()
		cond := meta.FindStatusCondition(st.Conditions, routeowner.ConditionVirtualService)
		Expect(cond).NotTo(BeNil())
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Reason).To(Equal(routing.ReasonNoGateway))
		Expect(cond.Message).To(ContainSubstring("no Gateway"))
		Expect(kcp.Client.Get(ctx, key, w)).To(Succeed())
		Eventually(func() []string { return reasons(eventsFor(ctx, w)) }).Should(ContainElement("Warning/" + routing.ReasonNoGateway))
		_, err := getVS(ctx, key)()
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no VirtualService without a Gateway")

		Expect(kcp.Client.Create(ctx, newGateway("late-"+suffix, sel, "late.example.com"))).To(Succeed())
		Eventually(watcherStatus(ctx, key)).Should(HaveField("State", v1beta2.StateReady))
		Eventually(getVS(ctx, key)).Should(HaveField("Hosts", []string{"late.example.com"}))
		Eventually(func() []string { return reasons(eventsFor(ctx, w)) }).Should(ContainElement("Normal/" + routeowner.ReasonApplied))
	})

	It("reports an invalid spec", func(ctx SpecContext) {
		w := newWatcher(ns, "no-manager", "", map[string]string{"any": "thing"})
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		Eventually(watcherStatus(ctx, client.ObjectKeyFromObject(w))).Should(And(
			HaveField("State", v1beta2.StateError),
			HaveField("Conditions", ContainElement(HaveField("Reason", routing.ReasonInvalidSpec))),
		))
	})

	It("deletes the VirtualService with the Watcher", func(ctx SpecContext) {
		sel := map[string]string{"gateway-set": "del-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("del-"+suffix, sel, "del.example.com"))).To(Succeed())
		w := newWatcher(ns, "doomed", "doomed-operator", sel)
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)
		Eventually(getVS(ctx, key)).Should(HaveField("Prefix", "/v2/doomed-operator/event"))

		Expect(kcp.Client.Delete(ctx, w)).To(Succeed())
		Eventually(func() bool {
			_, err := getVS(ctx, key)()
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "VirtualService deleted")
		Eventually(func() bool {
			return apierrors.IsNotFound(kcp.Client.Get(ctx, key, &v1beta2.Watcher{}))
		}).Should(BeTrue(), "Watcher gone once its finalizer ran")
	})

	It("propagates Gateway changes", func(ctx SpecContext) {
		sel := map[string]string{"gateway-set": "hosts-" + suffix}
		gw := newGateway("hosts-"+suffix, sel, "old.example.com")
		Expect(kcp.Client.Create(ctx, gw)).To(Succeed())
		w := newWatcher(ns, "hosts", "hosts-operator", sel)
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)
		Eventually(getVS(ctx, key)).Should(HaveField("Hosts", []string{"old.example.com"}))

		By("changing the Gateway's hosts")
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(gw), gw)).To(Succeed())
		gw.Spec.Servers[0].Hosts = []string{"new.example.com", "also.example.com"}
		Expect(kcp.Client.Update(ctx, gw)).To(Succeed())
		Eventually(getVS(ctx, key)).Should(HaveField("Hosts", []string{"also.example.com", "new.example.com"}))

		By("labelling a second Gateway into the selection")
		second := newGateway("hosts-second-"+suffix, nil, "second.example.com")
		Expect(kcp.Client.Create(ctx, second)).To(Succeed())
		second.Labels = sel
		Expect(kcp.Client.Update(ctx, second)).To(Succeed())
		// The controller lists gateways sorted, so the VirtualService is
		// stable; which name sorts first depends on the random suffix.
		wantGateways := []string{gatewayNS + "/hosts-" + suffix, gatewayNS + "/hosts-second-" + suffix}
		sort.Strings(wantGateways)
		Eventually(getVS(ctx, key)).Should(And(
			HaveField("Gateways", wantGateways),
			HaveField("Hosts", []string{"also.example.com", "new.example.com", "second.example.com"}),
		))

		By("labelling it out again")
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(second), second)).To(Succeed())
		second.Labels = nil
		Expect(kcp.Client.Update(ctx, second)).To(Succeed())
		Eventually(getVS(ctx, key)).Should(HaveField("Gateways", []string{gatewayNS + "/hosts-" + suffix}))
	})

	It("reverts hand edits of the VirtualService", func(ctx SpecContext) {
		sel := map[string]string{"gateway-set": "edit-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("edit-"+suffix, sel, "edit.example.com"))).To(Succeed())
		w := newWatcher(ns, "edited", "edited-operator", sel)
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		key := client.ObjectKeyFromObject(w)
		want := vsView{
			Gateways: []string{gatewayNS + "/edit-" + suffix}, Hosts: []string{"edit.example.com"},
			Prefix: "/v2/edited-operator/event", Host: "edited-operator-event-service." + ns + ".svc.cluster.local",
			Port: 8082, Routes: 1,
		}
		Eventually(getVS(ctx, key)).Should(Equal(want))

		By("changing the destination port and adding a host by hand")
		vs := &istionetworkingv1.VirtualService{}
		Expect(kcp.Client.Get(ctx, key, vs)).To(Succeed())
		vs.Spec.Http[0].Route[0].Destination.Port.Number = 1
		vs.Spec.Hosts = append(vs.Spec.Hosts, "evil.example.com")
		Expect(kcp.Client.Update(ctx, vs, client.FieldOwner("kubectl-edit"))).To(Succeed())
		Eventually(getVS(ctx, key)).Should(Equal(want))

		By("removing our hash annotation by hand")
		Expect(kcp.Client.Get(ctx, key, vs)).To(Succeed())
		delete(vs.Annotations, diffapply.HashAnnotation)
		Expect(kcp.Client.Update(ctx, vs, client.FieldOwner("kubectl-edit"))).To(Succeed())
		Eventually(func() (string, error) {
			err := kcp.Client.Get(ctx, key, vs)
			return vs.Annotations[diffapply.HashAnnotation], err
		}).ShouldNot(BeEmpty())

		By("deleting it")
		Expect(kcp.Client.Delete(ctx, vs)).To(Succeed())
		Eventually(getVS(ctx, key)).Should(Equal(want))
	})
})
