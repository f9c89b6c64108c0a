// Package routeowner decides which Watcher holds a route (a Gateway and a
// manager's event path /v2/<manager>/event, docs/architecture.md §4.10): the
// oldest claimant (Older) owns it; whether a Watcher holds one is read from
// the VirtualServices only vs-controller writes (RouteHolders), never from a
// status a Watcher's author can write, and recorded in the Watcher's
// condition ConditionVirtualService (TrustRoutes, HoldsRoute). The routing
// reconciler (package routing) acts on these rules; the SKR bundle (package
// bundle) gives webhooks only to holders; the runtime reconciler (package
// runtimes) trusts routes through them.
package routeowner

import (
	"context"
	"fmt"

	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

const (
	// ConditionVirtualService is the Watcher condition about its
	// VirtualService: True (ReasonApplied) when the Watcher holds its route.
	ConditionVirtualService = "VirtualServiceReady"
	// ReasonApplied: the Watcher's VirtualService routes its event path.
	ReasonApplied = "VirtualServiceApplied"
)

// watcherKind is the kind of the VirtualServices' controller.
const watcherKind = "Watcher"

// ReasonRouteConflict: an older Watcher (in any namespace) already routes
// the same manager's event path on one of the same Gateways
// (docs/architecture.md §4.10).
const ReasonRouteConflict = "RouteConflict"

// Older orders Watchers by age: creationTimestamp, then namespace/name (the
// API server's timestamps have one-second resolution).
func Older(a, b *v1beta2.Watcher) bool {
	if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
		return a.CreationTimestamp.Before(&b.CreationTimestamp)
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

// HoldsRoute reports whether w's route condition says it routes its
// manager's event path (True for its current generation). A Watcher's
// status is writable by whoever may write watchers/status, so the
// condition is trusted only on Watchers passed through TrustRoutes, which
// sets it from the VirtualServices vs-controller owns.
func HoldsRoute(w *v1beta2.Watcher) bool {
	c := meta.FindStatusCondition(w.Status.Conditions, ConditionVirtualService)
	return c != nil && c.Status == metav1.ConditionTrue && c.ObservedGeneration == w.Generation
}

// RouteHolders are the Watchers (by UID) that hold a route: each controls a
// VirtualService of its own name and namespace, which only vs-controller
// writes (its routing controller creates it for the owner of the route and
// deletes it from a Watcher that loses one). A Watcher's status never
// decides.
func RouteHolders(ctx context.Context, c client.Reader) (map[types.UID]bool, error) {
	var list istionetworkingv1.VirtualServiceList
	if err := c.List(ctx, &list); err != nil {
		return nil, fmt.Errorf("list VirtualServices: %w", err)
	}
	out := map[types.UID]bool{}
	gv := v1beta2.GroupVersion.String()
	for _, vs := range list.Items {
		ref := metav1.GetControllerOf(vs)
		if ref != nil && ref.Kind == watcherKind && ref.APIVersion == gv && ref.Name == vs.Name {
			out[ref.UID] = true
		}
	}
	return out, nil
}

// TrustRoutes is watchers with each route condition as holders says (True
// for the current generation when the Watcher holds a route, False
// otherwise), whatever their status claimed. Watchers it changes are
// copies; watchers itself is not modified.
func TrustRoutes(watchers []v1beta2.Watcher, holders map[types.UID]bool) []v1beta2.Watcher {
	out := make([]v1beta2.Watcher, len(watchers))
	for i := range watchers {
		w := &watchers[i]
		if HoldsRoute(w) == holders[w.UID] {
			out[i] = *w
			continue
		}
		c := w.DeepCopy()
		cond := metav1.Condition{Type: ConditionVirtualService, Status: metav1.ConditionFalse, Reason: "NoVirtualService",
			Message: "vs-controller owns no VirtualService for this Watcher", ObservedGeneration: w.Generation}
		if holders[w.UID] {
			cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, ReasonApplied, "vs-controller's VirtualService routes it"
		}
		meta.SetStatusCondition(&c.Status.Conditions, cond)
		out[i] = *c
	}
	return out
}
