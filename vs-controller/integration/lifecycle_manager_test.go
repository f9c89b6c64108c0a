package integration_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
)

// Lifecycle Manager's objects, copied with their provenance
// (test/fixtures/lifecycle-manager/README.md).
var lmFixtures = filepath.Join(testenv.RepoRoot(), "test", "fixtures", "lifecycle-manager")

// lmObjects returns the objects of the given kind in a fixture file.
func lmObjects(file, kind string) []*unstructured.Unstructured {
	data, err := os.ReadFile(filepath.Join(lmFixtures, file))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []*unstructured.Unstructured
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else {
			ExpectWithOffset(1, err).NotTo(HaveOccurred(), file)
		}
		if u := (&unstructured.Unstructured{Object: doc}); len(doc) > 0 && u.GetKind() == kind {
			out = append(out, u)
		}
	}
}

// lmWatchers are the Watchers of the fixtures' watchers/ folder, moved into
// namespace ns.
func lmWatchers(ns string) []*unstructured.Unstructured {
	files, err := filepath.Glob(filepath.Join(lmFixtures, "watchers", "*.yaml"))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, f := range files {
		for _, u := range lmObjects(filepath.Join("watchers", filepath.Base(f)), "Watcher") {
			u.SetNamespace(ns)
			out = append(out, u)
		}
	}
	return out
}

// lmGateway is LM's Gateway kcp-system/klm-watcher as deployed.
func lmGateway() *unstructured.Unstructured {
	gws := lmObjects("pki/kustomize-control-plane-watcher-pki-and-gateway.yaml", "Gateway")
	ExpectWithOffset(1, gws).To(HaveLen(1))
	return gws[0]
}

var _ = Describe("Lifecycle Manager's Watchers", func() {
	It("each get the status vs-controller can give them: routed, or why not", func(ctx SpecContext) {
		ns := newNamespace(ctx, "lm-watchers")
		gw := lmGateway()
		gw.SetNamespace(gatewayNS) // the suite's gateway namespace
		Expect(kcp.Client.Create(ctx, gw)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(kcp.Client.Delete(ctx, gw)).To(Succeed()) })

		// Why vs-controller cannot route the edge cases; the others are
		// routed through LM's Gateway.
		unroutable := map[string]string{
			"manager-upper-case": `spec.manager "Lifecycle-Manager" is not a DNS-1123 label`,
			"manager-with-dot":   `spec.manager "klm.v2" is not a DNS-1123 label`,
			"no-manager":         "no manager name: spec.manager and the label operator.kyma-project.io/managed-by are both empty",
			"empty-service-info": "spec.serviceInfo.name is empty; spec.serviceInfo.namespace is empty; spec.serviceInfo.port 0 is not in 1..65535",
		}
		watchers := lmWatchers(ns)
		Expect(watchers).To(HaveLen(10))
		for _, u := range watchers {
			Expect(kcp.Client.Create(ctx, u)).To(Succeed(), "Watcher %s", u.GetName())
		}
		DeferCleanup(func(ctx SpecContext) {
			for _, u := range watchers {
				Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, u))).To(Succeed())
			}
			Eventually(func() ([]v1beta2.Watcher, error) {
				var list v1beta2.WatcherList
				err := kcp.Client.List(ctx, &list, client.InNamespace(ns))
				return list.Items, err
			}).Should(BeEmpty(), "the finalizer ran for every Watcher")
		})

		// Several fixtures are alternative samples of one manager
		// (lifecycle-manager) on the one Gateway: only the oldest routes it
		// (creationTimestamp, then name), the others report RouteConflict
		// (docs/architecture.md §4.10).
		owners := map[string]*v1beta2.Watcher{}
		for _, u := range watchers {
			if _, ok := unroutable[u.GetName()]; ok {
				continue
			}
			w := &v1beta2.Watcher{}
			Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(u), w)).To(Succeed())
			o := owners[w.ManagerName()]
			if o == nil || w.CreationTimestamp.Before(&o.CreationTimestamp) ||
				w.CreationTimestamp.Equal(&o.CreationTimestamp) && w.Name < o.Name {
				owners[w.ManagerName()] = w
			}
		}
		routed, conflicts := 0, 0
		for _, u := range watchers {
			key := client.ObjectKeyFromObject(u)
			if w := (&v1beta2.Watcher{}); unroutable[u.GetName()] == "" && kcp.Client.Get(ctx, key, w) == nil && owners[w.ManagerName()].Name != w.Name {
				conflicts++
				Eventually(watcherStatus(ctx, key)).Should(And(
					HaveField("State", v1beta2.StateError),
					HaveField("Conditions", ContainElement(And(
						HaveField("Type", routeowner.ConditionVirtualService),
						HaveField("Reason", routeowner.ReasonRouteConflict),
						HaveField("Message", ContainSubstring("owned by the older Watcher "+ns+"/"+owners[w.ManagerName()].Name)),
					))),
				), "Watcher %s", key.Name)
				_, err := getVS(ctx, key)()
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no VirtualService for %s", key.Name)
				continue
			}
			if why, ok := unroutable[u.GetName()]; ok {
				Eventually(watcherStatus(ctx, key)).Should(HaveField("Conditions", ContainElement(And(
					HaveField("Type", routeowner.ConditionVirtualService),
					HaveField("Status", metav1.ConditionFalse),
					HaveField("Reason", routing.ReasonInvalidSpec),
					HaveField("Message", HavePrefix("invalid spec: "+why)),
				))), "Watcher %s", key.Name)
				st, _ := watcherStatus(ctx, key)()
				Expect(st.State).To(Equal(v1beta2.StateError))
				Eventually(func() []string { return reasons(eventsFor(ctx, u)) }).Should(
					ContainElement("Warning/"+routing.ReasonInvalidSpec), "Watcher %s", key.Name)
				_, err := getVS(ctx, key)()
				Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no VirtualService for %s", key.Name)
				continue
			}
			routed++
			w := &v1beta2.Watcher{}
			Expect(kcp.Client.Get(ctx, key, w)).To(Succeed())
			si := w.Spec.ServiceInfo
			Eventually(getVS(ctx, key)).Should(Equal(vsView{
				Gateways: []string{gatewayNS + "/klm-watcher"},
				Hosts:    []string{"listener.cp.kyma.cloud.sap"},
				Prefix:   "/v2/" + w.ManagerName() + "/event",
				Host:     si.Name + "." + si.Namespace + ".svc.cluster.local",
				Port:     uint32(si.Port),
				Routes:   1,
			}), "Watcher %s", key.Name)
			Eventually(watcherStatus(ctx, key)).Should(And(
				HaveField("State", v1beta2.StateReady),
				HaveField("Conditions", ContainElement(And(
					HaveField("Type", routeowner.ConditionVirtualService),
					HaveField("Status", metav1.ConditionTrue),
					HaveField("Reason", routeowner.ReasonApplied),
				))),
			), "Watcher %s", key.Name)
		}
		Expect(routed + conflicts).To(Equal(6))
		Expect(routed).To(Equal(len(owners)))
	})
})

// A KCP as Lifecycle Manager left it: its Gateway kcp-system/klm-watcher, its
// stock Watcher with LM's finalizer and status, and the VirtualService LM
// made for it. vs-controller must take the Watcher over with the same route;
// LM's gateway namespace (kcp-system) is not vs-controller's default
// (istio-system), so this needs --gateway-namespace=kcp-system.
var _ = Describe("vs-controller on a KCP that Lifecycle Manager set up", Ordered, func() {
	var (
		c       client.Client
		cluster *testenv.Cluster
		lmVS    *unstructured.Unstructured
		watcher *unstructured.Unstructured
	)
	const lmNS = routing.LifecycleManagerGatewayNamespace

	BeforeAll(func(ctx SpecContext) {
		own, err := testenv.Start("kcp-lm")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(own.Stop()).To(Succeed()) })
		cluster = own.Cluster("kcp-lm")
		c = cluster.Client
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: lmNS}})).To(Succeed())
		Expect(c.Create(ctx, lmGateway(), client.FieldOwner("argo-cd"))).To(Succeed())

		watchers := lmObjects("watchers/kustomize-control-plane-klm-watcher.yaml", "Watcher")
		Expect(watchers).To(HaveLen(1))
		watcher = watchers[0]
		watcher.SetFinalizers([]string{routing.Finalizer}) // LM's finalizer has the same name
		Expect(c.Create(ctx, watcher, client.FieldOwner("argo-cd"))).To(Succeed())
		watcher.Object["status"] = map[string]any{
			"state": "Ready",
			"conditions": []any{map[string]any{
				"type": "VirtualService", "status": "True", "reason": "Ready", "message": "VirtualService is ready",
				"lastTransitionTime": "2026-11-23T10:00:00Z",
			}},
		}
		Expect(c.Status().Update(ctx, watcher, client.FieldOwner("lifecycle-manager"))).To(Succeed())

		vss := lmObjects("virtualservice/virtualservice-klm-watcher-rendered.yaml", "VirtualService")
		Expect(vss).To(HaveLen(1))
		lmVS = vss[0]
		refs := lmVS.GetOwnerReferences()
		Expect(refs).To(HaveLen(1))
		refs[0].UID = watcher.GetUID() // the fixture's uid is made up
		lmVS.SetOwnerReferences(refs)
		Expect(c.Create(ctx, lmVS.DeepCopy(), client.FieldOwner("lifecycle-manager"))).To(Succeed())
		Expect(c.Get(ctx, client.ObjectKeyFromObject(lmVS), lmVS)).To(Succeed())
	})

	// run runs the Watcher reconciler alone, with the given gateway
	// namespace, until the spec ends.
	run := func(gatewayNamespace string) {
		mgr, err := ctrl.NewManager(cluster.Config, ctrl.Options{
			Scheme:                 testenv.Scheme(),
			Metrics:                metricsserver.Options{BindAddress: "0"},
			HealthProbeBindAddress: "0",
			Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect((&routing.Reconciler{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("vs-controller"), GatewayNamespace: gatewayNamespace,
		}).SetupWithManager(mgr)).To(Succeed())
		ctx, cancel := context.WithCancel(context.Background())
		stopped := make(chan struct{})
		go func() {
			defer GinkgoRecover()
			defer close(stopped)
			Expect(mgr.Start(ctx)).To(Succeed())
		}()
		DeferCleanup(func() {
			cancel()
			Eventually(stopped).Should(BeClosed())
		})
	}

	vsCondition := func(ctx context.Context) func() (*metav1.Condition, error) {
		return func() (*metav1.Condition, error) {
			w := &v1beta2.Watcher{}
			err := c.Get(ctx, client.ObjectKeyFromObject(watcher), w)
			return meta.FindStatusCondition(w.Status.Conditions, routeowner.ConditionVirtualService), err
		}
	}

	It("with vs-controller's default gateway namespace, says where it looked and keeps LM's route", func(ctx SpecContext) {
		run("") // routing.DefaultGatewayNamespace
		Eventually(vsCondition(ctx)).Should(And(
			Not(BeNil()),
			HaveField("Reason", routing.ReasonNoGateway),
			HaveField("Message", ContainSubstring("no Gateway in namespace istio-system")),
			HaveField("Message", ContainSubstring("Lifecycle Manager's default is kcp-system")),
		))
		vs := &istionetworkingv1.VirtualService{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(lmVS), vs)).To(Succeed())
		Expect(vs.ResourceVersion).To(Equal(lmVS.GetResourceVersion()), "LM's VirtualService untouched")
	})

	It("with --gateway-namespace=kcp-system, routes LM's Watcher exactly as LM did", func(ctx SpecContext) {
		run(lmNS)
		Eventually(vsCondition(ctx)).Should(And(
			Not(BeNil()),
			HaveField("Status", metav1.ConditionTrue),
			HaveField("Reason", routeowner.ReasonApplied),
		))
		key := client.ObjectKeyFromObject(lmVS)
		// The fixture: same name and namespace as the Watcher, LM's
		// Gateway, its host, /v2/lifecycle-manager/event to the events
		// Service on 8082.
		want := vsView{
			Gateways: []string{"kcp-system/klm-watcher"}, Hosts: []string{"listener.cp.kyma.cloud.sap"},
			Prefix: "/v2/lifecycle-manager/event", Host: "klm-controller-manager-events.kcp-system.svc.cluster.local",
			Port: 8082, Routes: 1,
		}
		lmTyped := &istionetworkingv1.VirtualService{}
		raw, err := json.Marshal(lmVS.Object)
		Expect(err).NotTo(HaveOccurred())
		Expect(json.Unmarshal(raw, lmTyped)).To(Succeed())
		Expect(viewOf(lmTyped)).To(Equal(want), "the fixture is LM's route")
		Eventually(func() (vsView, error) {
			vs := &istionetworkingv1.VirtualService{}
			err := c.Get(ctx, key, vs)
			return viewOf(vs), err
		}).Should(Equal(want))

		vs := &istionetworkingv1.VirtualService{}
		Expect(c.Get(ctx, key, vs)).To(Succeed())
		Expect(vs.UID).To(Equal(lmVS.GetUID()), "LM's VirtualService taken over, not recreated")
		w := &v1beta2.Watcher{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(watcher), w)).To(Succeed())
		Expect(metav1.IsControlledBy(vs, w)).To(BeTrue())
		Expect(w.Status.State).To(Equal(v1beta2.StateReady))
		Expect(meta.FindStatusCondition(w.Status.Conditions, "VirtualService")).NotTo(BeNil(), "LM's own condition is left alone")
		// The one difference: LM names the HTTP route <ns>/<name>, we
		// watcher-<manager>; Envoy uses the name only in stats and logs.
		Expect(vs.Spec.Http[0].Name).To(Equal("watcher-lifecycle-manager"))

		By("deleting the VirtualService and dropping LM's finalizer with the Watcher")
		Expect(c.Delete(ctx, w)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, key, &istionetworkingv1.VirtualService{})) }).Should(BeTrue())
		Eventually(func() bool { return apierrors.IsNotFound(c.Get(ctx, client.ObjectKeyFromObject(watcher), w)) }).Should(BeTrue())
	})
})
