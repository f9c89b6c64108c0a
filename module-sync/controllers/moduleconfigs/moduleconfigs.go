package controllers

import (
	"context"
	"errors"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
)

// mirrorReconciler mirrors one runtime (a Kyma, the work item) per pass.
type mirrorReconciler struct {
	client   client.Client
	runtimes *runtimeClients
	mirror   *mirror.Mirror
	interval time.Duration
	backoff  workqueue.TypedRateLimiter[string]
	// conflicts backs off, fast, after a write conflict (the cache had not
	// seen the previous pass's write yet).
	conflicts workqueue.TypedRateLimiter[string]
}

func (r *mirrorReconciler) setup(mgr ctrl.Manager, l *listener.Listener, o Options) error {
	lookup := identity.NewKymaLookup(mgr.GetCache(), o.KymaNamespace)
	return ctrl.NewControllerManagedBy(mgr).
		Named("mirror").
		// Kyma created or deleted (and the runtime-id label changed): a pass.
		For(identity.NewKyma(), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(l.Events(), enqueueRuntime(lookup, o.KymaNamespace, o.ConfirmDelay))).
		WithOptions(controller.Options{MaxConcurrentReconciles: o.Workers}).
		Complete(r)
}

// enqueueRuntime enqueues the Kyma of an event's runtime (the shared
// lookup: runtime-id label first, then name); events of unknown runtimes
// are counted and dropped. With confirm > 0 the runtime is mirrored again
// that much later: the SKR's admission webhook reports a change before the
// API server stores it, so the first pass may read the Module CR as it was.
func enqueueRuntime(lookup identity.RuntimeLookup, namespace string, confirm time.Duration) handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			ev, ok := listener.EventFrom(e.Object)
			if !ok {
				return
			}
			rt, found, err := lookup.LookupRuntime(ctx, ev.RuntimeID)
			switch {
			case err != nil:
				Events.WithLabelValues("lookup-failed").Inc()
				ctrl.Log.WithName("mirror").Error(err, "looking up the runtime of an event", "runtimeID", ev.RuntimeID)
			case !found:
				Events.WithLabelValues("unknown-runtime").Inc()
			default:
				Events.WithLabelValues("enqueued").Inc()
				req := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: rt.KymaName}}
				q.Add(req)
				if confirm > 0 {
					q.AddAfter(req, confirm)
				}
			}
		},
	}
}

// Reconcile mirrors the Kyma's runtime, or removes its ModuleConfigs when
// the Kyma is gone or being deleted.
func (r *mirrorReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	log := ctrl.LoggerFrom(ctx)
	key := req.String()
	kyma := identity.NewKyma()
	err := r.client.Get(ctx, req.NamespacedName, kyma)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if apierrors.IsNotFound(err) || kyma.DeletionTimestamp != nil {
		n, err := r.mirror.Remove(ctx, mirror.Kyma{Name: req.Name, Namespace: req.Namespace})
		MirrorWrites.WithLabelValues("deleted").Add(float64(n))
		if err != nil {
			MirrorPasses.WithLabelValues("failed").Inc()
			return reconcile.Result{RequeueAfter: r.backoff.When(key)}, nil
		}
		MirrorPasses.WithLabelValues("removed").Inc()
		r.backoff.Forget(key)
		return reconcile.Result{}, nil
	}
	id := identity.RuntimeIDOf(kyma)
	skr, err := r.runtimes.forRuntime(ctx, id)
	if err != nil {
		result := "failed"
		if errors.Is(err, errNoKubeconfig) {
			result = "no-kubeconfig"
		}
		MirrorPasses.WithLabelValues(result).Inc()
		log.Info("runtime not mirrored", "runtimeID", id, "reason", err.Error())
		return reconcile.Result{RequeueAfter: r.backoff.When(key)}, nil
	}
	res, err := r.mirror.Sync(ctx, skr, mirror.Kyma{Name: kyma.Name, Namespace: kyma.Namespace, UID: kyma.UID, RuntimeID: id})
	MirrorWrites.WithLabelValues("created").Add(float64(res.Created))
	MirrorWrites.WithLabelValues("updated").Add(float64(res.Updated))
	MirrorWrites.WithLabelValues("deleted").Add(float64(res.Deleted))
	if err != nil {
		MirrorPasses.WithLabelValues("failed").Inc()
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: r.conflicts.When(key)}, nil
		}
		log.Info("mirror pass failed; retrying with backoff", "runtimeID", id, "error", err.Error())
		return reconcile.Result{RequeueAfter: r.backoff.When(key)}, nil
	}
	r.conflicts.Forget(key)
	if res.Writes() > 0 {
		MirrorPasses.WithLabelValues("synced").Inc()
		log.V(1).Info("mirrored", "runtimeID", id, "created", res.Created, "updated", res.Updated, "deleted", res.Deleted)
	} else {
		MirrorPasses.WithLabelValues("unchanged").Inc()
	}
	r.backoff.Forget(key)
	return reconcile.Result{RequeueAfter: jitter(r.interval)}, nil
}
