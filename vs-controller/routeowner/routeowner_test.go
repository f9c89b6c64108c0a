package routeowner_test

import (
	"context"
	"errors"
	"testing"
	"time"

	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

var epoch = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func watcher(ns, name string, age int) *v1beta2.Watcher {
	return &v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name), Generation: 2,
		CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second))}}
}

func routeCondition(w *v1beta2.Watcher, status metav1.ConditionStatus, gen int64) *v1beta2.Watcher {
	w = w.DeepCopy()
	meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService, Status: status, Reason: "R", ObservedGeneration: gen})
	return w
}

// TestOlder: by creation time, then namespace, then name.
func TestOlder(t *testing.T) {
	for _, tc := range []struct {
		a, b *v1beta2.Watcher
		want bool
	}{
		{watcher("z", "z", 0), watcher("a", "a", 1), true},
		{watcher("a", "a", 1), watcher("z", "z", 0), false},
		{watcher("a", "z", 0), watcher("b", "a", 0), true},
		{watcher("a", "a", 0), watcher("a", "b", 0), true},
		{watcher("a", "b", 0), watcher("a", "a", 0), false},
		{watcher("a", "a", 0), watcher("a", "a", 0), false},
	} {
		if got := routeowner.Older(tc.a, tc.b); got != tc.want {
			t.Errorf("Older(%s/%s@%s, %s/%s@%s) = %t", tc.a.Namespace, tc.a.Name, tc.a.CreationTimestamp, tc.b.Namespace, tc.b.Name, tc.b.CreationTimestamp, got)
		}
	}
}

// TestRouteHolders: a Watcher holds a route when it controls the
// VirtualService of its own name; anything else (another name, a plain
// owner reference, another kind) does not count, and a failed list is an
// error.
func TestRouteHolders(t *testing.T) {
	s := k8sruntime.NewScheme()
	utilruntime.Must(istionetworkingv1.AddToScheme(s))
	holder, renamed, plain := watcher("ns", "holder", 0), watcher("ns", "renamed", 0), watcher("ns", "plain", 0)
	ref := func(w *v1beta2.Watcher) metav1.OwnerReference {
		return *metav1.NewControllerRef(w, v1beta2.GroupVersion.WithKind("Watcher"))
	}
	vs := func(name string, refs ...metav1.OwnerReference) client.Object {
		return &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, OwnerReferences: refs}}
	}
	notController := ref(plain)
	notController.Controller = nil
	otherKind := ref(watcher("ns", "cm", 0))
	otherKind.Kind = "ConfigMap"
	c := fakecluster.New(t, s, fakecluster.WithObjects(vs("holder", ref(holder)), vs("other-name", ref(renamed)), vs("plain", notController), vs("cm", otherKind)))
	got, err := routeowner.RouteHolders(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || !got[holder.UID] {
		t.Errorf("holders %v, want %s only", got, holder.UID)
	}
	c.Fail(fakecluster.List, "VirtualService", "", fakecluster.ErrUnreachable, 1)
	if _, err := routeowner.RouteHolders(context.Background(), c); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("list failed: %v", err)
	}
}

// TestTrustRoutes: each Watcher's route condition is what the holders say
// for its current generation, whatever its status claimed; the input is
// not modified.
func TestTrustRoutes(t *testing.T) {
	holds, forged, stale, quiet := watcher("ns", "holds", 0), routeCondition(watcher("ns", "forged", 1), metav1.ConditionTrue, 2),
		routeCondition(watcher("ns", "stale", 2), metav1.ConditionTrue, 1), watcher("ns", "quiet", 3)
	in := []v1beta2.Watcher{*holds, *forged, *stale, *quiet}
	out := routeowner.TrustRoutes(in, map[types.UID]bool{holds.UID: true, stale.UID: true})
	for i, want := range []bool{true, false, true, false} {
		if got := routeowner.HoldsRoute(&out[i]); got != want {
			t.Errorf("%s: holds %t, want %t", out[i].Name, got, want)
		}
	}
	if c := meta.FindStatusCondition(out[0].Status.Conditions, routeowner.ConditionVirtualService); c.Reason != routeowner.ReasonApplied {
		t.Errorf("holder's condition %+v", c)
	}
	if c := meta.FindStatusCondition(out[1].Status.Conditions, routeowner.ConditionVirtualService); c.Reason != "NoVirtualService" || c.ObservedGeneration != 2 {
		t.Errorf("forged condition %+v", c)
	}
	if len(out[3].Status.Conditions) != 0 {
		t.Errorf("a Watcher without a route and no claim got %+v", out[3].Status.Conditions)
	}
	if !routeowner.HoldsRoute(&in[1]) || routeowner.HoldsRoute(&in[2]) {
		t.Error("TrustRoutes modified its input")
	}
}
