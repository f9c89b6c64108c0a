package routeowner_test

import (
	"context"
	"testing"
	"time"

	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

func watcher(ns, name string, created time.Time, generation int64) v1beta2.Watcher {
	return v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(ns + "/" + name),
		Generation: generation, CreationTimestamp: metav1.NewTime(created)}}
}

func TestOlder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	a, b := watcher("b", "x", t0, 1), watcher("a", "y", t0.Add(time.Second), 1)
	if !routeowner.Older(&a, &b) || routeowner.Older(&b, &a) {
		t.Error("the earlier creationTimestamp is not older")
	}
	c, d := watcher("a", "z", t0, 1), watcher("b", "a", t0, 1)
	if !routeowner.Older(&c, &d) || routeowner.Older(&d, &c) {
		t.Error("same second: the namespace does not decide")
	}
	e, f := watcher("a", "a", t0, 1), watcher("a", "b", t0, 1)
	if !routeowner.Older(&e, &f) || routeowner.Older(&f, &e) {
		t.Error("same second and namespace: the name does not decide")
	}
}

// TestTrustRoutes: who holds a route comes from the VirtualServices
// vs-controller controls (RouteHolders), never from a Watcher's status.
func TestTrustRoutes(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	holder, forger, loser := watcher("kcp", "holder", t0, 2), watcher("kcp", "forger", t0, 1), watcher("kcp", "loser", t0, 1)
	// The forger claims its route in its status; the loser's status says it holds none.
	meta.SetStatusCondition(&forger.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService,
		Status: metav1.ConditionTrue, Reason: routeowner.ReasonApplied, ObservedGeneration: 1})
	// The holder's condition is of an older generation.
	meta.SetStatusCondition(&holder.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService,
		Status: metav1.ConditionTrue, Reason: routeowner.ReasonApplied, ObservedGeneration: 1})
	if !routeowner.HoldsRoute(&forger) || routeowner.HoldsRoute(&holder) || routeowner.HoldsRoute(&loser) {
		t.Fatal("HoldsRoute does not read the condition of the current generation")
	}

	s := runtime.NewScheme()
	if err := istionetworkingv1.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	vs := func(name string, owner *v1beta2.Watcher, kind string) *istionetworkingv1.VirtualService {
		v := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp", Name: name}}
		ref := *metav1.NewControllerRef(owner, v1beta2.GroupVersion.WithKind(kind))
		v.OwnerReferences = []metav1.OwnerReference{ref}
		return v
	}
	c := fake.NewClientBuilder().WithScheme(s).WithObjects(
		vs("holder", &holder, "Watcher"),
		vs("not-the-forger", &forger, "Watcher"), // controlled by the forger, but not of its name
		vs("loser", &loser, "Kyma"),              // of its name, but not controlled by a Watcher
	).Build()
	holders, err := routeowner.RouteHolders(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(holders) != 1 || !holders[holder.UID] {
		t.Fatalf("holders %v, want only %s", holders, holder.UID)
	}

	in := []v1beta2.Watcher{holder, forger, loser}
	out := routeowner.TrustRoutes(in, holders)
	if !routeowner.HoldsRoute(&out[0]) || routeowner.HoldsRoute(&out[1]) || routeowner.HoldsRoute(&out[2]) {
		t.Errorf("trusted routes: holder %t, forger %t, loser %t; want true, false, false",
			routeowner.HoldsRoute(&out[0]), routeowner.HoldsRoute(&out[1]), routeowner.HoldsRoute(&out[2]))
	}
	if routeowner.HoldsRoute(&in[0]) || !routeowner.HoldsRoute(&in[1]) {
		t.Error("TrustRoutes modified the Watchers it was given")
	}
}
