package routing

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// The watches' handlers and predicates, for routing_test.

func (r *Reconciler) Claimants() handler.TypedEventHandler[client.Object, reconcile.Request] {
	return r.claimants()
}

func (r *Reconciler) WatchersForGateway(ctx context.Context, gw client.Object) []reconcile.Request {
	return r.watchersForGateway(ctx, gw)
}

func RouteConditionChanged() predicate.Predicate { return routeConditionChanged{} }
