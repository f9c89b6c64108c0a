package routing_test

// The fake-cluster tier of the Watcher reconciler (test/fakecluster): a KCP
// in memory; vs-controller/integration runs it against a real API server.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	istioapiv1 "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

var (
	ctx   = context.Background()
	epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
)

func scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	utilruntime.Must(istionetworkingv1.AddToScheme(s))
	return s
}

// watcher is a routable Watcher of manager created age seconds after epoch.
func watcher(ns, name, manager string, age int) *v1beta2.Watcher {
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Generation: 1,
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second))},
		Spec: v1beta2.WatcherSpec{
			Manager:         manager,
			ServiceInfo:     v1beta2.Service{Name: "listener", Namespace: "kcp-system", Port: 8082},
			ResourceToWatch: v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "v1beta2", Resource: "kymas"},
			Field:           v1beta2.SpecField,
			Gateway:         v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "watcher"}}},
		},
	}
}

func gateway(name string, labels map[string]string, hosts ...string) *istionetworkingv1.Gateway {
	gw := &istionetworkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Namespace: routing.DefaultGatewayNamespace, Name: name, Labels: labels}}
	if len(hosts) > 0 {
		gw.Spec.Servers = []*istioapiv1.Server{{Hosts: hosts, Port: &istioapiv1.Port{Number: 443, Name: "https", Protocol: "HTTPS"}}}
	}
	return gw
}

var watcherGW = map[string]string{"app": "watcher"}

type setup struct {
	kcp *fakecluster.Cluster
	rec *events.FakeRecorder
	r   *routing.Reconciler
}

func newSetup(t *testing.T, objs ...client.Object) *setup {
	t.Helper()
	s := &setup{rec: events.NewFakeRecorder(100)}
	s.kcp = fakecluster.New(t, scheme(), fakecluster.WithObjects(objs...))
	s.r = &routing.Reconciler{Client: s.kcp, Recorder: s.rec, GatewayNamespace: routing.DefaultGatewayNamespace}
	return s
}

func req(ns, name string) ctrl.Request {
	return ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: name}}
}

func (s *setup) reconcile(t *testing.T, ns, name string) {
	t.Helper()
	res, err := s.r.Reconcile(ctx, req(ns, name))
	if err != nil {
		t.Fatalf("Reconcile %s/%s: %v", ns, name, err)
	}
	if res != (ctrl.Result{}) {
		t.Errorf("Reconcile %s/%s: %+v, want no requeue (watches bring changes)", ns, name, res)
	}
}

func (s *setup) watcher(t *testing.T, ns, name string) *v1beta2.Watcher {
	t.Helper()
	w := &v1beta2.Watcher{}
	if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, w); err != nil {
		t.Fatal(err)
	}
	return w
}

func (s *setup) vs(t *testing.T, ns, name string) *istionetworkingv1.VirtualService {
	t.Helper()
	vs := &istionetworkingv1.VirtualService{}
	if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, vs); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return vs
}

func (s *setup) events() []string {
	var out []string
	for {
		select {
		case e := <-s.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func condition(w *v1beta2.Watcher) *metav1.Condition {
	return meta.FindStatusCondition(w.Status.Conditions, routeowner.ConditionVirtualService)
}

func vsReconciles(result string) float64 {
	return testutil.ToFloat64(vsmetrics.VirtualServiceReconciles.WithLabelValues(result))
}

// TestFakeRoute: a Watcher gets the finalizer and one VirtualService of its
// name (owned by it) that routes its manager's event path from the selected
// Gateways' hosts to its listener; state Ready with one Event; a pass with
// nothing new writes nothing; a hand edit of the route is repaired.
func TestFakeRoute(t *testing.T) {
	s := newSetup(t, watcher("kcp-system", "w", "lifecycle-manager", 0),
		gateway("b", watcherGW, "b.example.com", "shared.example.com"), gateway("a", watcherGW, "a.example.com", "shared.example.com"),
		gateway("other", map[string]string{"app": "other"}, "other.example.com"))
	applied := vsReconciles("applied")
	s.reconcile(t, "kcp-system", "w")

	w := s.watcher(t, "kcp-system", "w")
	if !controllerutil.ContainsFinalizer(w, routing.Finalizer) {
		t.Error("no finalizer")
	}
	c := condition(w)
	if w.Status.State != v1beta2.StateReady || c == nil || c.Status != metav1.ConditionTrue || c.Reason != routeowner.ReasonApplied ||
		c.Message != "VirtualService routes /v2/lifecycle-manager/event through 2 Gateway(s)" || w.Status.ObservedGeneration != 1 {
		t.Errorf("status %+v", w.Status)
	}
	vs := s.vs(t, "kcp-system", "w")
	if vs == nil {
		t.Fatal("no VirtualService")
	}
	if got := strings.Join(vs.Spec.Gateways, ","); got != "istio-system/a,istio-system/b" {
		t.Errorf("gateways %s", got)
	}
	if got := strings.Join(vs.Spec.Hosts, ","); got != "a.example.com,b.example.com,shared.example.com" {
		t.Errorf("hosts %s", got)
	}
	if len(vs.Spec.Http) != 1 || vs.Spec.Http[0].Match[0].GetUri().GetPrefix() != "/v2/lifecycle-manager/event" ||
		vs.Spec.Http[0].Route[0].Destination.Host != "listener.kcp-system.svc.cluster.local" || vs.Spec.Http[0].Route[0].Destination.Port.Number != 8082 {
		t.Errorf("route %v", vs.Spec.Http)
	}
	// Issue 40: a route's header values are applied after ext_authz (and
	// one Envoy rejects freezes every route of the gateway): vs-controller
	// sets, adds and removes no header, and rewrites nothing.
	for _, r := range vs.Spec.Http {
		if r.Headers != nil || r.Rewrite != nil || r.Delegate != nil {
			t.Errorf("route %s touches headers, rewrites or delegates: %v", r.Name, r)
		}
		for _, d := range r.Route {
			if d.Headers != nil {
				t.Errorf("route %s sets headers at its destination: %v", r.Name, d.Headers)
			}
		}
	}
	if ref := metav1.GetControllerOf(vs); ref == nil || ref.UID != w.UID || ref.Kind != "Watcher" {
		t.Errorf("controller %+v", ref)
	}
	if evs := s.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+routeowner.ReasonApplied) {
		t.Errorf("events %q", evs)
	}
	if vsReconciles("applied")-applied != 1 {
		t.Error("not counted as applied")
	}

	unchanged := vsReconciles("unchanged")
	end := s.kcp.ExpectNoWrites(t)
	s.reconcile(t, "kcp-system", "w")
	end()
	if vsReconciles("unchanged")-unchanged != 1 || len(s.events()) != 0 {
		t.Error("second pass: not counted as unchanged, or an Event")
	}

	// A hand edit of the route is put back.
	vs.Spec.Http[0].Route[0].Destination.Host = "evil.attacker.svc.cluster.local"
	if err := s.kcp.Update(ctx, vs); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	if got := s.vs(t, "kcp-system", "w").Spec.Http[0].Route[0].Destination.Host; got != "listener.kcp-system.svc.cluster.local" {
		t.Errorf("hand edit not repaired: %s", got)
	}
}

// TestFakeCannotRoute: a Watcher no Gateway matches, whose Gateways have no
// hosts or whose spec is invalid gets state Error with the reason, a
// Warning Event and no VirtualService (an earlier one goes for an invalid
// spec); it is not retried (a change brings it back), but a Gateway list or
// an apply that fails is.
func TestFakeCannotRoute(t *testing.T) {
	s := newSetup(t, watcher("kcp-system", "w", "m", 0), gateway("nohosts", map[string]string{"app": "nohosts"}))
	s.reconcile(t, "kcp-system", "w")
	w := s.watcher(t, "kcp-system", "w")
	if c := condition(w); w.Status.State != v1beta2.StateError || c.Reason != routing.ReasonNoGateway || !strings.Contains(c.Message, "no Gateway in namespace istio-system") {
		t.Errorf("no Gateway: %s %+v", w.Status.State, c)
	}
	if evs := s.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+routing.ReasonNoGateway) {
		t.Errorf("events %q", evs)
	}
	s.reconcile(t, "kcp-system", "w")
	if evs := s.events(); len(evs) != 0 {
		t.Errorf("the same failure again: events %q, want none", evs)
	}

	w.Spec.Gateway.LabelSelector.MatchLabels = map[string]string{"app": "nohosts"}
	if err := s.kcp.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	if c := condition(s.watcher(t, "kcp-system", "w")); c.Reason != routing.ReasonNoHosts {
		t.Errorf("no hosts: %+v", c)
	}

	// Routable, then invalid: the VirtualService goes.
	if err := s.kcp.Create(ctx, gateway("gw", watcherGW, "gw.example.com")); err != nil {
		t.Fatal(err)
	}
	w = s.watcher(t, "kcp-system", "w")
	w.Spec.Gateway.LabelSelector.MatchLabels = watcherGW
	if err := s.kcp.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	if s.vs(t, "kcp-system", "w") == nil {
		t.Fatal("no VirtualService")
	}
	w = s.watcher(t, "kcp-system", "w")
	w.Spec.ServiceInfo.Port = 0
	w.Spec.Manager = "Not_A_Label"
	if err := s.kcp.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	w = s.watcher(t, "kcp-system", "w")
	if c := condition(w); c.Reason != routing.ReasonInvalidSpec || !strings.Contains(c.Message, "spec.manager") || !strings.Contains(c.Message, "spec.serviceInfo.port 0") {
		t.Errorf("invalid spec: %+v; want every problem at once", c)
	}
	if s.vs(t, "kcp-system", "w") != nil {
		t.Error("the VirtualService of an invalid Watcher stayed")
	}

	// More than 100 Gateways: not routed.
	for i := range 100 {
		if err := s.kcp.Create(ctx, gateway(fmt.Sprintf("gw-%03d", i), watcherGW, "gw.example.com")); err != nil {
			t.Fatal(err)
		}
	}
	w.Spec.ServiceInfo.Port, w.Spec.Manager = 8082, "m"
	if err := s.kcp.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	if c := condition(s.watcher(t, "kcp-system", "w")); c.Reason != routing.ReasonInvalidSpec || !strings.Contains(c.Message, "matches 101 Gateways, more than 100") {
		t.Errorf("101 Gateways: %+v", c)
	}
	for i := range 100 {
		if err := s.kcp.Delete(ctx, gateway(fmt.Sprintf("gw-%03d", i), nil)); err != nil {
			t.Fatal(err)
		}
	}
	w = s.watcher(t, "kcp-system", "w")

	// Transient: returned for a retry, and in the status.
	w.Spec.ServiceInfo.Port, w.Spec.Manager = 8082, "m"
	if err := s.kcp.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.kcp.Fail(fakecluster.List, "Gateway", "", fakecluster.ErrUnreachable, 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("Gateway list failed: %v", err)
	}
	if c := condition(s.watcher(t, "kcp-system", "w")); c.Reason != routing.ReasonGatewayListErr {
		t.Errorf("Gateway list failed: %+v", c)
	}
	applyFailed := vsReconciles("apply-failed")
	s.kcp.Fail(fakecluster.Apply, "VirtualService", "", apierrors.NewInternalError(errors.New("etcd")), 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !apierrors.IsInternalError(err) {
		t.Errorf("apply failed: %v", err)
	}
	if c := condition(s.watcher(t, "kcp-system", "w")); c.Reason != routing.ReasonApplyFailed || vsReconciles("apply-failed")-applyFailed != 1 {
		t.Errorf("apply failed: %+v", c)
	}
	s.kcp.Fail(fakecluster.StatusPatch, "Watcher", "", fakecluster.Conflict("watchers", "w"), 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !apierrors.IsConflict(err) {
		t.Errorf("status conflict: %v", err)
	}
	s.reconcile(t, "kcp-system", "w")
	if w := s.watcher(t, "kcp-system", "w"); w.Status.State != v1beta2.StateReady {
		t.Errorf("after the failures: %s", w.Status.State)
	}
}

// TestFakeRouteConflict: the oldest Watcher of a manager on a Gateway owns
// the route (in any namespace); a younger one gets RouteConflict and no
// VirtualService; when the owner goes, the next reconcile hands it over.
func TestFakeRouteConflict(t *testing.T) {
	old, young := watcher("team-a", "old", "m", 0), watcher("team-b", "young", "m", 10)
	s := newSetup(t, old, young, watcher("team-c", "other-manager", "n", 5), gateway("gw", watcherGW, "gw.example.com"))
	for _, w := range []*v1beta2.Watcher{young, old} {
		s.reconcile(t, w.Namespace, w.Name)
	}
	s.reconcile(t, "team-c", "other-manager")
	// The young one reconciled first and got a VirtualService; once the
	// old one holds the route, the young one's goes.
	conflicts := vsReconciles("route-conflict")
	s.reconcile(t, "team-b", "young")
	y := s.watcher(t, "team-b", "young")
	if c := condition(y); y.Status.State != v1beta2.StateError || c.Reason != routeowner.ReasonRouteConflict ||
		!strings.Contains(c.Message, "owned by the older Watcher team-a/old") || !strings.Contains(c.Message, "istio-system/gw") {
		t.Errorf("younger Watcher: %s %+v", y.Status.State, c)
	}
	if s.vs(t, "team-b", "young") != nil || s.vs(t, "team-a", "old") == nil || s.vs(t, "team-c", "other-manager") == nil {
		t.Error("want VirtualServices for old and other-manager only")
	}
	if vsReconciles("route-conflict")-conflicts != 1 {
		t.Error("not counted as a route conflict")
	}

	// The owner goes: its VirtualService first, then the finalizer.
	o := s.watcher(t, "team-a", "old")
	if err := s.kcp.Delete(ctx, o); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "team-a", "old")
	if s.vs(t, "team-a", "old") != nil {
		t.Error("the deleted Watcher's VirtualService stayed")
	}
	if err := s.kcp.Get(ctx, client.ObjectKeyFromObject(o), &v1beta2.Watcher{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Watcher kept its finalizer: %v", err)
	}
	s.reconcile(t, "team-b", "young")
	if s.vs(t, "team-b", "young") == nil || s.watcher(t, "team-b", "young").Status.State != v1beta2.StateReady {
		t.Error("the route was not handed over")
	}
	s.reconcile(t, "team-a", "old") // gone: nothing to do
}

// TestFakeFinalize: a VirtualService that is not the Watcher's is left
// alone; a delete that fails keeps the finalizer and is an Event.
func TestFakeFinalize(t *testing.T) {
	w := watcher("kcp-system", "w", "m", 0)
	w.Finalizers = []string{routing.Finalizer}
	foreign := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: "w"}}
	s := newSetup(t, w, foreign)
	if err := s.kcp.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t, "kcp-system", "w")
	if s.vs(t, "kcp-system", "w") == nil {
		t.Error("a VirtualService the Watcher does not own was deleted")
	}

	w = watcher("kcp-system", "w", "m", 0)
	w.Finalizers = []string{routing.Finalizer}
	owned := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: "w",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "operator.kyma-project.io/v1beta2", Kind: "Watcher", Name: "w", UID: w.UID}}}}
	s = newSetup(t, w, owned)
	if err := s.kcp.Delete(ctx, w); err != nil {
		t.Fatal(err)
	}
	s.kcp.Fail(fakecluster.Delete, "VirtualService", "w", apierrors.NewInternalError(errors.New("etcd")), 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !apierrors.IsInternalError(err) {
		t.Errorf("delete failed: %v", err)
	}
	if evs := s.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+routing.ReasonDeleteFailed) {
		t.Errorf("events %q", evs)
	}
	if !controllerutil.ContainsFinalizer(s.watcher(t, "kcp-system", "w"), routing.Finalizer) {
		t.Error("finalizer removed although the VirtualService stayed")
	}
	s.reconcile(t, "kcp-system", "w")
	if s.vs(t, "kcp-system", "w") != nil {
		t.Error("Lifecycle Manager's VirtualService (plain owner reference) stayed")
	}

	s = newSetup(t, watcher("kcp-system", "w", "m", 0))
	s.kcp.Fail(fakecluster.Patch, "Watcher", "", fakecluster.Conflict("watchers", "w"), 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !apierrors.IsConflict(err) {
		t.Errorf("finalizer conflict: %v", err)
	}
	s.kcp.Fail(fakecluster.Get, "Watcher", "", fakecluster.ErrUnreachable, 1)
	if _, err := s.r.Reconcile(ctx, req("kcp-system", "w")); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("Watcher unreadable: %v", err)
	}
}

// TestFakeWatches: a Gateway event enqueues the Watchers that select it
// (in the gateway namespace only); a Watcher's change of manager or
// deletion enqueues the other claimants of both managers; the status
// predicate passes changes of the route condition only.
func TestFakeWatches(t *testing.T) {
	a, b, c := watcher("ns", "a", "m", 0), watcher("ns", "b", "m", 1), watcher("ns", "c", "n", 2)
	c.Spec.Gateway.LabelSelector.MatchLabels = map[string]string{"app": "other"}
	s := newSetup(t, a, b, c)
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	drain := func() []string {
		var out []string
		for q.Len() > 0 {
			r, _ := q.Get()
			q.Done(r)
			out = append(out, r.Name)
		}
		return out
	}

	h := s.r.Claimants()
	h.Create(ctx, event.TypedCreateEvent[client.Object]{Object: a}, q)
	if got := strings.Join(drain(), ","); got != "b" {
		t.Errorf("Watcher a created: enqueued %s, want b (the other claimant of m)", got)
	}
	moved := a.DeepCopy()
	moved.Spec.Manager, moved.Generation = "n", 2
	h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: a, ObjectNew: moved}, q)
	if got := strings.Join(drain(), ","); got != "b,c" {
		t.Errorf("a moved from m to n: enqueued %s, want b and c", got)
	}
	h.Update(ctx, event.TypedUpdateEvent[client.Object]{ObjectOld: a, ObjectNew: a}, q)
	if got := drain(); len(got) != 0 {
		t.Errorf("a status update: enqueued %v", got)
	}
	h.Delete(ctx, event.TypedDeleteEvent[client.Object]{Object: c}, q)
	if got := drain(); len(got) != 0 {
		t.Errorf("c (alone on n) deleted: enqueued %v", got)
	}

	if got := s.r.WatchersForGateway(ctx, gateway("gw", watcherGW)); len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Errorf("Gateway gw: %v, want a and b", got)
	}
	elsewhere := gateway("gw", watcherGW)
	elsewhere.Namespace = "default"
	if got := s.r.WatchersForGateway(ctx, elsewhere); len(got) != 0 {
		t.Errorf("a Gateway outside the gateway namespace: %v", got)
	}

	p := routing.RouteConditionChanged()
	ready := a.DeepCopy()
	meta.SetStatusCondition(&ready.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionTrue, Reason: routeowner.ReasonApplied})
	forged := ready.DeepCopy()
	meta.SetStatusCondition(&forged.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionFalse, Reason: "Forged"})
	other := ready.DeepCopy()
	meta.SetStatusCondition(&other.Status.Conditions, metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "X"})
	for _, tc := range []struct {
		name     string
		old, new client.Object
		want     bool
	}{
		{"condition appears", a, ready, true},
		{"condition changed", ready, forged, true},
		{"another condition", ready, other, false},
		{"no condition", a, a, false},
		{"not Watchers", gateway("x", nil), gateway("x", nil), false},
	} {
		if got := p.Update(event.UpdateEvent{ObjectOld: tc.old, ObjectNew: tc.new}); got != tc.want {
			t.Errorf("%s: %t, want %t", tc.name, got, tc.want)
		}
	}
	if p.Create(event.CreateEvent{}) || p.Delete(event.DeleteEvent{}) || p.Generic(event.GenericEvent{}) {
		t.Error("the status predicate passes updates only")
	}
}
