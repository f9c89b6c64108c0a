package routing

import (
	"context"
	"fmt"
	"slices"

	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

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
		if o.UID == w.UID || o.ManagerName() != w.ManagerName() || !routeowner.Older(o, w) || len(o.SpecProblems()) > 0 {
			continue
		}
		if owner != nil && routeowner.Older(owner, o) {
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
