package routing

import (
	"context"
	"fmt"
	"slices"

	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

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

// routeOwner returns the oldest other Watcher that claims the route of w's
// manager on one of gateways ("namespace/name") and is older than w, and the
// Gateway they share; nil when w owns its routes. A Watcher being deleted
// still owns its route until it is gone (its VirtualService is deleted
// first), so two VirtualServices never serve one path.
func (r *Reconciler) routeOwner(ctx context.Context, w *v1beta2.Watcher, gateways []string) (*v1beta2.Watcher, string, error) {
	var list v1beta2.WatcherList
	if err := r.Client.List(ctx, &list); err != nil {
		return nil, "", err
	}
	var owner *v1beta2.Watcher
	shared := ""
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == w.UID || o.ManagerName() != w.ManagerName() || !Older(o, w) || len(o.SpecProblems()) > 0 {
			continue
		}
		if owner != nil && Older(owner, o) {
			continue
		}
		theirs, err := r.gatewaysOf(ctx, o)
		if err != nil {
			return nil, "", err
		}
		for _, g := range theirs {
			if slices.Contains(gateways, g) {
				owner, shared = o, g
				break
			}
		}
	}
	return owner, shared, nil
}

// gatewaysOf lists the Gateways ("namespace/name") a Watcher selects; none
// for an unusable selector.
func (r *Reconciler) gatewaysOf(ctx context.Context, w *v1beta2.Watcher) ([]string, error) {
	sel, err := metav1.LabelSelectorAsSelector(&w.Spec.Gateway.LabelSelector)
	if err != nil {
		return nil, nil
	}
	var gws istionetworkingv1.GatewayList
	if err := r.Client.List(ctx, &gws, client.InNamespace(r.GatewayNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, err
	}
	out := make([]string, 0, len(gws.Items))
	for _, gw := range gws.Items {
		out = append(out, gw.Namespace+"/"+gw.Name)
	}
	return out, nil
}

func conflictError(w, owner *v1beta2.Watcher, gateway string) error {
	return fmt.Errorf("the route of manager %q on Gateway %s is owned by the older Watcher %s/%s (created %s); "+
		"this Watcher gets no VirtualService and no webhook in any runtime until that one is deleted or changes its manager or Gateways",
		w.ManagerName(), gateway, owner.Namespace, owner.Name, owner.CreationTimestamp.UTC().Format("2006-01-02T15:04:05Z"))
}

// claimants re-reconciles, on any Watcher change, the other Watchers of the
// same manager (old and new name): a change of the owner may hand the route
// over.
func (r *Reconciler) claimants() handler.TypedEventHandler[client.Object, reconcile.Request] {
	enqueue := func(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request], objs ...client.Object) {
		managers := map[string]bool{}
		self := map[client.ObjectKey]bool{}
		for _, o := range objs {
			if w, ok := o.(*v1beta2.Watcher); ok {
				managers[w.ManagerName()] = true
				self[client.ObjectKeyFromObject(w)] = true
			}
		}
		var list v1beta2.WatcherList
		if err := r.Client.List(ctx, &list); err != nil {
			log.FromContext(ctx).Error(err, "list Watchers for a route hand-over")
			return
		}
		for i := range list.Items {
			w := &list.Items[i]
			key := client.ObjectKeyFromObject(w)
			if managers[w.ManagerName()] && !self[key] {
				q.Add(reconcile.Request{NamespacedName: key})
			}
		}
	}
	return handler.TypedFuncs[client.Object, reconcile.Request]{
		CreateFunc: func(ctx context.Context, e event.TypedCreateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
		UpdateFunc: func(ctx context.Context, e event.TypedUpdateEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if e.ObjectOld.GetGeneration() == e.ObjectNew.GetGeneration() &&
				(e.ObjectOld.GetDeletionTimestamp() == nil) == (e.ObjectNew.GetDeletionTimestamp() == nil) {
				return
			}
			enqueue(ctx, q, e.ObjectOld, e.ObjectNew)
		},
		DeleteFunc: func(ctx context.Context, e event.TypedDeleteEvent[client.Object], q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			enqueue(ctx, q, e.Object)
		},
	}
}
