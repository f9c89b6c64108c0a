// Package moduleconfigs is module-sync's mirror controller
// (docs/architecture.md §4.11): on a Watcher event, at start, on a Kyma
// change and periodically it mirrors a runtime's Module CRs into
// ModuleConfigs (package mirror) and removes them when the Kyma goes away.
// The work item is the Kyma.
package moduleconfigs

import (
	"context"
	"errors"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
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
	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// Reconciler mirrors one runtime (a Kyma, the work item) per pass.
type Reconciler struct {
	// Client of the KCP (the manager's cached client).
	Client   client.Client
	Runtimes *skrclient.Runtimes
	Mirror   *mirror.Mirror
	// Interval of the periodic pass per runtime.
	Interval time.Duration
	Backoff  workqueue.TypedRateLimiter[string]
	// Conflicts backs off, fast, after a write conflict (the cache had not
	// seen the previous pass's write yet).
	Conflicts workqueue.TypedRateLimiter[string]
	// KymaNamespace holds the Kymas.
	KymaNamespace string
	// ConfirmDelay: after an event, the runtime is mirrored at once and
	// again this much later (0: only at once). See enqueueRuntime.
	ConfirmDelay time.Duration
	Workers      int
	// Turns (shared with the SyncResource controller) lets one pass per
	// runtime run at a time; PassTimeout bounds a pass.
	Turns       *pacing.Turns
	PassTimeout time.Duration
	// Shards, when set, owns runtimes across replicas: a pass runs only on
	// the runtime's owner (nil: one replica, every runtime).
	Shards *shards.Shards
	// requeue wakes a pass that waited for its runtime's turn, and the
	// runtimes this replica gained.
	requeue pacing.Requeue
	// arrivals: when the events not yet read by a pass came, by runtime
	// (syncmetrics.EventLatency).
	arrivals arrivals
}

// arrivals holds, per runtime (its Kyma's key), when the first event not
// yet taken by a mirror pass was handed over by the listener, and when
// the runtime's confirm pass is due.
type arrivals struct {
	mu sync.Mutex
	at map[string]time.Time
	// confirm: when the pass that confirms the last event's pass is due.
	// Kept here, not as a second, later item in the controller's queue:
	// controller-runtime's priority queue holds one entry per item, and a
	// later add of an item already waiting there merges into the earlier
	// one, so a confirm pass queued beside the event's pass was dropped
	// (TestConfirmPassThroughTheControllerQueue).
	confirm map[string]time.Time
}

// note records an event of runtime at now unless an earlier one waits.
func (a *arrivals) note(runtime string, now time.Time) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, waiting := a.at[runtime]; waiting {
		return
	}
	if a.at == nil {
		a.at = map[string]time.Time{}
	}
	a.at[runtime] = now
}

// begin is the start of a pass over runtime at now: it returns when the
// event the pass takes came (ok false: none waits), and with confirm > 0
// makes the runtime's confirm pass due confirm after now; a pass that
// begins when its confirm pass is due is that pass.
func (a *arrivals) begin(runtime string, now time.Time, confirm time.Duration) (at time.Time, ok bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	at, ok = a.at[runtime]
	delete(a.at, runtime)
	if due, set := a.confirm[runtime]; set && !due.After(now) {
		delete(a.confirm, runtime)
	}
	if ok && confirm > 0 {
		if a.confirm == nil {
			a.confirm = map[string]time.Time{}
		}
		a.confirm[runtime] = now.Add(confirm)
	}
	return at, ok
}

// next is when runtime's next pass is due after a pass that asked for
// after (0: none): sooner when its confirm pass is due first.
func (a *arrivals) next(runtime string, now time.Time, after time.Duration) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	due, set := a.confirm[runtime]
	if !set {
		return after
	}
	if until := max(due.Sub(now), time.Millisecond); after == 0 || until < after {
		return until
	}
	return after
}

// forget drops what is held of runtime (its Kyma is gone).
func (a *arrivals) forget(runtime string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.at, runtime)
	delete(a.confirm, runtime)
}

// SetupWithManager registers the controller; events are the listener's.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager, events <-chan event.GenericEvent) error {
	lookup := identity.NewKymaLookup(mgr.GetCache(), r.KymaNamespace)
	opts := controller.Options{MaxConcurrentReconciles: r.Workers}
	if r.Shards != nil {
		// Every replica mirrors the runtimes it owns; gained ones are
		// mirrored at once.
		opts.NeedLeaderElection = ptr.To(false)
		r.Shards.OnChange(r.gained)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("mirror").
		// Kyma created or deleted (and the runtime-id label changed): a pass.
		For(identity.NewKyma(), builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(events, enqueueRuntime(lookup, r.KymaNamespace, &r.arrivals))).
		WatchesRawSource(r.requeue.Source()).
		WithOptions(opts).
		Complete(r)
}

// gained enqueues the runtimes this replica gained, drops the runtime
// clients of those another replica owns now, and counts those it owns
// (runtime_watcher_shard_owned_runtimes).
func (r *Reconciler) gained(gained func(runtime string) bool) error {
	if !r.requeue.Started() {
		return nil // its start enqueues every object, and its passes ask the owner
	}
	list := identity.NewKymaList()
	if err := r.Client.List(context.Background(), list, client.InNamespace(r.KymaNamespace)); err != nil {
		return err
	}
	owned := 0
	for i := range list.Items {
		key := types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}
		if r.Shards.Owns(key.String()) {
			owned++
		}
		if gained(key.String()) {
			r.requeue.Add(reconcile.Request{NamespacedName: key})
		} else if r.Shards.Elsewhere(key.String()) {
			// Another replica owns it now: its clients (the module
			// users' too, shared with the SyncResource passes) go.
			r.Runtimes.Forget(identity.RuntimeIDOf(&list.Items[i]))
		}
	}
	r.Shards.SetOwned(owned)
	return nil
}

// enqueueRuntime enqueues the Kyma of an event's runtime (listener.KymaOf:
// the shared lookup, runtime-id label first, then name, bounded by the
// listener's lookup timeout) and notes the event in arrived (nil: not
// noted; the pass that takes it schedules the runtime's confirm pass);
// events of unknown runtimes are counted and dropped.
func enqueueRuntime(lookup identity.RuntimeLookup, namespace string, arrived *arrivals) handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			ev, ok := listener.EventFrom(e.Object)
			if !ok {
				return
			}
			key, found, err := listener.KymaOf(ctx, lookup, namespace, ev.RuntimeID)
			switch {
			case err != nil:
				syncmetrics.Events.WithLabelValues("lookup-failed").Inc()
				ctrl.Log.WithName("mirror").Error(err, "looking up the runtime of an event", "runtimeID", ev.RuntimeID)
			case !found:
				syncmetrics.Events.WithLabelValues("unknown-runtime").Inc()
			default:
				syncmetrics.Events.WithLabelValues("enqueued").Inc()
				req := reconcile.Request{NamespacedName: key}
				arrived.note(key.String(), time.Now())
				q.Add(req)
			}
		},
	}
}

// Reconcile mirrors the Kyma's runtime, or removes its ModuleConfigs when
// the Kyma is gone or being deleted. A pass that takes an event makes the
// runtime's confirm pass due ConfirmDelay later (the SKR's admission
// webhook reports a change before the API server stores it, so the
// event's pass may read the Module CR as it was); every pass until then
// comes back by that time at the latest.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (res reconcile.Result, err error) {
	log := ctrl.LoggerFrom(ctx)
	key := req.String()
	ctx, done, ok := r.Shards.Begin(ctx, key)
	if !ok {
		// Another replica owns the runtime (its gain requeues it there).
		syncmetrics.MirrorPasses.WithLabelValues("not-owner").Inc()
		r.arrivals.forget(key)
		return reconcile.Result{}, nil
	}
	defer done()
	kyma := identity.NewKyma()
	err = r.Client.Get(ctx, req.NamespacedName, kyma)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	if apierrors.IsNotFound(err) || kyma.DeletionTimestamp != nil {
		n, err := r.Mirror.Remove(ctx, mirror.Kyma{Name: req.Name, Namespace: req.Namespace})
		syncmetrics.MirrorWrites.WithLabelValues("deleted").Add(float64(n))
		if err != nil {
			syncmetrics.MirrorPasses.WithLabelValues("failed").Inc()
			return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
		}
		syncmetrics.MirrorPasses.WithLabelValues("removed").Inc()
		r.Backoff.Forget(key)
		r.arrivals.forget(key)
		return reconcile.Result{}, nil
	}
	release, ok := r.Turns.Take(key, "mirror "+key, r.requeue.Wake(req))
	if !ok {
		// Requeued when the pass that holds the turn ends (at the latest
		// after pacing.Wait).
		syncmetrics.MirrorPasses.WithLabelValues("runtime-busy").Inc()
		return reconcile.Result{RequeueAfter: pacing.Wait}, nil
	}
	defer release()
	if at, evented := r.arrivals.begin(key, time.Now(), r.ConfirmDelay); evented {
		syncmetrics.EventLatency.WithLabelValues("queued").Observe(time.Since(at).Seconds())
		defer func() { syncmetrics.EventLatency.WithLabelValues("mirrored").Observe(time.Since(at).Seconds()) }()
	}
	defer func() {
		if err == nil {
			res.RequeueAfter = r.arrivals.next(key, time.Now(), res.RequeueAfter)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, r.PassTimeout)
	defer cancel()
	id := identity.RuntimeIDOf(kyma)
	skr, err := r.Runtimes.For(ctx, id)
	if err != nil {
		result := "failed"
		if errors.Is(err, skrclient.ErrNoKubeconfig) {
			result = "no-kubeconfig"
		}
		syncmetrics.MirrorPasses.WithLabelValues(result).Inc()
		log.Info("runtime not mirrored", "runtimeID", id, "reason", skrclient.Bounded(err.Error()))
		return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
	}
	synced, err := r.Mirror.Sync(ctx, skr, mirror.Kyma{Name: kyma.Name, Namespace: kyma.Namespace, UID: kyma.UID, RuntimeID: id})
	syncmetrics.MirrorWrites.WithLabelValues("created").Add(float64(synced.Created))
	syncmetrics.MirrorWrites.WithLabelValues("updated").Add(float64(synced.Updated))
	syncmetrics.MirrorWrites.WithLabelValues("deleted").Add(float64(synced.Deleted))
	if err != nil {
		syncmetrics.MirrorPasses.WithLabelValues("failed").Inc()
		if apierrors.IsConflict(err) {
			return reconcile.Result{RequeueAfter: r.Conflicts.When(key)}, nil
		}
		log.Info("mirror pass failed; retrying with backoff", "runtimeID", id, "error", skrclient.Bounded(err.Error()))
		return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
	}
	r.Conflicts.Forget(key)
	if synced.Writes() > 0 {
		syncmetrics.MirrorPasses.WithLabelValues("synced").Inc()
		log.V(1).Info("mirrored", "runtimeID", id, "created", synced.Created, "updated", synced.Updated, "deleted", synced.Deleted)
	} else {
		syncmetrics.MirrorPasses.WithLabelValues("unchanged").Inc()
	}
	r.Backoff.Forget(key)
	return reconcile.Result{RequeueAfter: pacing.Jitter(r.Interval)}, nil
}
