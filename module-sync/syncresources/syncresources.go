// Package syncresources is module-sync's SyncResource controller
// (docs/architecture.md §4.11): finalizer, apply into the runtime (package
// syncitems), status, cleanup on deletion, backoff only when a retry can help
// and a periodic drift pass.
package syncresources

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// Finalizer of every SyncResource module-sync applies: removed once what
// it created in the runtime is deleted (or the runtime is gone).
const Finalizer = "operator.kyma-project.io/module-sync"

// kymaField indexes SyncResources by spec.kyma, moduleField by spec.module.
const (
	kymaField   = "spec.kyma"
	moduleField = "spec.module"
)

// Reconciler applies SyncResources into their runtimes.
type Reconciler struct {
	// Client of the KCP (the manager's cached client).
	Client   client.Client
	Runtimes *skrclient.Runtimes
	// Interval of the periodic apply pass per SyncResource (drift
	// correction).
	Interval time.Duration
	Backoff  workqueue.TypedRateLimiter[string]
	Workers  int
	// RBAC renders each module's grant into the runtimes.
	RBAC grants.Renderer
	// Turns (shared with the mirror controller) lets one pass per runtime
	// run at a time; PassTimeout bounds the runtime's part of a pass.
	Turns       *pacing.Turns
	PassTimeout time.Duration
	// PlatformWriters are applied under their module's grant without
	// being named in it (Options.PlatformWriters).
	PlatformWriters []string
	now             func() metav1.Time
	// Shards, when set, owns runtimes across replicas: a SyncResource is
	// applied only by its runtime's owner (nil: one replica, every runtime).
	Shards *shards.Shards
	// requeue wakes a pass that waited for its runtime's turn, and the
	// SyncResources of runtimes this replica gained.
	requeue pacing.Requeue
}

// SetupWithManager registers the controller and the index of SyncResources
// by Kyma.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if err := indexFields(context.Background(), mgr.GetFieldIndexer()); err != nil {
		return err
	}
	opts := controller.Options{MaxConcurrentReconciles: r.Workers}
	if r.Shards != nil {
		// Every replica applies the SyncResources of the runtimes it owns;
		// those of gained runtimes at once.
		opts.NeedLeaderElection = ptr.To(false)
		r.Shards.OnChange(r.gained)
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named("syncresource").
		// Spec changes and deletion; not its own status writes.
		For(&v1alpha1.SyncResource{}, builder.WithPredicates(predicate.Or(predicate.GenerationChangedPredicate{}, deletionStarted{}))).
		// A Kyma that appears or goes away: its SyncResources.
		Watches(identity.NewKyma(), handler.EnqueueRequestsFromMapFunc(r.forKyma), builder.WithPredicates(kymaCreatedOrDeleted{}), builder.OnlyMetadata).
		// A grant that changes: the SyncResources of its module.
		Watches(&v1alpha1.ModuleGrant{}, handler.EnqueueRequestsFromMapFunc(r.forGrant)).
		WatchesRawSource(r.requeue.Source()).
		WithOptions(opts).
		Complete(r)
}

// gained enqueues the SyncResources of the runtimes this replica gained.
func (r *Reconciler) gained(gained func(runtime string) bool) error {
	if !r.requeue.Started() {
		return nil // its start enqueues every object, and its passes ask the owner
	}
	list := &v1alpha1.SyncResourceList{}
	if err := r.Client.List(context.Background(), list); err != nil {
		return err
	}
	for i := range list.Items {
		sr := &list.Items[i]
		if gained(sr.Namespace + "/" + sr.Spec.Kyma) {
			r.requeue.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sr.Namespace, Name: sr.Name}})
		}
	}
	return nil
}

// indexFields registers the indexes of SyncResources by Kyma and by module.
func indexFields(ctx context.Context, idx client.FieldIndexer) error {
	if err := idx.IndexField(ctx, &v1alpha1.SyncResource{}, kymaField, func(obj client.Object) []string {
		return []string{obj.(*v1alpha1.SyncResource).Spec.Kyma}
	}); err != nil {
		return err
	}
	return idx.IndexField(ctx, &v1alpha1.SyncResource{}, moduleField, func(obj client.Object) []string {
		return []string{obj.(*v1alpha1.SyncResource).Spec.Module}
	})
}

func (r *Reconciler) forKyma(ctx context.Context, kyma client.Object) []reconcile.Request {
	return r.requests(ctx, kyma.GetNamespace(), kymaField, kyma.GetName())
}

func (r *Reconciler) forGrant(ctx context.Context, mg client.Object) []reconcile.Request {
	return r.requests(ctx, mg.GetNamespace(), moduleField, mg.GetName())
}

func (r *Reconciler) requests(ctx context.Context, namespace, field, value string) []reconcile.Request {
	list := &v1alpha1.SyncResourceList{}
	if err := r.Client.List(ctx, list, client.InNamespace(namespace), client.MatchingFields{field: value}); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: list.Items[i].Namespace, Name: list.Items[i].Name}})
	}
	return out
}

// Reconcile adds the finalizer, applies the SyncResource into its runtime
// and writes its status; on deletion it removes what it created.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	key := req.String()
	sr := &v1alpha1.SyncResource{}
	if err := r.Client.Get(ctx, req.NamespacedName, sr); err != nil {
		r.Backoff.Forget(key)
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	ctx, done, ok := r.Shards.Begin(ctx, sr.Namespace+"/"+sr.Spec.Kyma)
	if !ok {
		// Another replica owns the runtime (its gain requeues it there).
		syncmetrics.SyncReconciles.WithLabelValues("not-owner").Inc()
		return reconcile.Result{}, nil
	}
	defer done()
	release, ok := r.Turns.Take(sr.Namespace+"/"+sr.Spec.Kyma, "syncresource "+key, r.requeue.Wake(req))
	if !ok {
		// Requeued when the pass that holds the turn ends (at the latest
		// after pacing.Wait).
		syncmetrics.SyncReconciles.WithLabelValues("runtime-busy").Inc()
		return reconcile.Result{RequeueAfter: pacing.Wait}, nil
	}
	defer release()
	if sr.DeletionTimestamp != nil {
		return r.finalize(ctx, key, sr)
	}
	if !controllerutil.ContainsFinalizer(sr, Finalizer) {
		controllerutil.AddFinalizer(sr, Finalizer)
		if err := r.Client.Update(ctx, sr); err != nil {
			return reconcile.Result{}, err
		}
	}

	// Bound writers: a SyncResource is applied only while its module's
	// grant names its writer; otherwise nothing reaches the runtime and
	// what it applied earlier is left as it is (inert).
	if grant, err := r.grantOf(ctx, sr); err != nil {
		return reconcile.Result{}, err
	} else if werr := r.writerAllowed(grant, sr); werr != nil {
		syncmetrics.SyncReconciles.WithLabelValues("writer-refused").Inc()
		// The inventory is kept: a grant that names the writer again, or
		// the SyncResource's deletion, still finds what it created.
		prev := map[string]*v1alpha1.ObjectReference{}
		for _, it := range sr.Status.Items {
			prev[it.Name] = it.Object
		}
		items := make([]v1alpha1.ItemStatus, 0, len(sr.Spec.Items)+len(sr.Status.Items))
		for _, it := range sr.Spec.Items {
			items = append(items, v1alpha1.ItemStatus{Name: it.Name, State: v1alpha1.ItemRefused, Object: prev[it.Name], Message: skrclient.Bounded(werr.Error())})
			delete(prev, it.Name)
		}
		for _, it := range sr.Status.Items {
			if _, removed := prev[it.Name]; removed && it.Object != nil {
				items = append(items, v1alpha1.ItemStatus{Name: it.Name, State: v1alpha1.ItemRefused, Object: it.Object,
					Message: skrclient.Bounded("removed from the spec; not deleted: " + werr.Error())})
			}
		}
		if err := r.writeStatus(ctx, sr, items, v1alpha1.StateRefused, metav1.Condition{
			Type: syncitems.ConditionSynced, Status: metav1.ConditionFalse, Reason: "WriterNotGranted", Message: skrclient.Bounded(werr.Error()),
		}); err != nil {
			return reconcile.Result{}, err
		}
		r.Backoff.Forget(key)
		return reconcile.Result{}, nil // the grant watch brings it back
	}

	pass, cancel := context.WithTimeout(ctx, r.PassTimeout)
	defer cancel()
	skr, grant, kymaGone, rbacErr, err := r.skrOf(pass, sr)
	var unreachableErr *unreachable
	if errors.As(err, &unreachableErr) {
		err = nil // reported per item below, as an unreachable runtime
	}
	if err != nil {
		reason := "RuntimeUnreachable"
		if kymaGone {
			reason = "KymaNotFound"
		} else if errors.Is(err, skrclient.ErrNoKubeconfig) {
			reason = "NoKubeconfig"
		} else if errors.Is(err, grants.ErrWorkloadPolicyInactive) {
			reason = "WorkloadPolicyNotActive"
		}
		syncmetrics.SyncReconciles.WithLabelValues("no-runtime").Inc()
		if werr := r.writeStatus(ctx, sr, sr.Status.Items, v1alpha1.StateError, metav1.Condition{
			Type: syncitems.ConditionSynced, Status: metav1.ConditionFalse, Reason: reason, Message: skrclient.Bounded(err.Error()),
		}); werr != nil {
			return reconcile.Result{}, werr
		}
		if kymaGone {
			return reconcile.Result{}, nil // the Kyma watch brings it back
		}
		return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
	}

	var res syncitems.Result
	if skr == nil {
		res = syncitems.Unreachable(sr, errors.New(skrclient.Bounded(unreachableErr.err.Error())))
	} else {
		res = syncitems.Apply(pass, skr, grant, sr)
	}
	if rbacErr != nil {
		ctrl.LoggerFrom(ctx).Info("module RBAC not written; retrying", "error", skrclient.Bounded(rbacErr.Error()))
		res.Retry = true
	}
	for _, it := range res.Items {
		syncmetrics.SyncItems.WithLabelValues(string(it.State)).Inc()
	}
	state, cond := res.Summary()
	if err := r.writeStatus(ctx, sr, res.Items, state, cond); err != nil {
		return reconcile.Result{}, err
	}
	switch {
	case res.Retry:
		syncmetrics.SyncReconciles.WithLabelValues("retry").Inc()
		return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
	case state == v1alpha1.StateReady:
		syncmetrics.SyncReconciles.WithLabelValues("applied").Inc()
	default:
		syncmetrics.SyncReconciles.WithLabelValues("failed").Inc() // refused or invalid: waits for a spec change
	}
	r.Backoff.Forget(key)
	return reconcile.Result{RequeueAfter: pacing.Jitter(r.Interval)}, nil
}

// skrOf is the client of the SyncResource's runtime that acts as its
// module's user, after it brought that user's RBAC there in line with the
// module's grant; kymaGone when its Kyma does not exist. rbacErr: the RBAC
// could not be written (the pass goes on: the runtime refuses what the user
// may not do, and the caller retries).
func (r *Reconciler) skrOf(ctx context.Context, sr *v1alpha1.SyncResource) (skr client.Client, grant grants.Grant, kymaGone bool, rbacErr, err error) {
	if grant, err = r.grantOf(ctx, sr); err != nil {
		return nil, grant, false, nil, err
	}
	kyma := identity.NewKyma()
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: sr.Namespace, Name: sr.Spec.Kyma}, kyma); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, grant, true, nil, fmt.Errorf("no Kyma %s/%s", sr.Namespace, sr.Spec.Kyma)
		}
		return nil, grant, false, nil, err
	}
	runtimeID := identity.RuntimeIDOf(kyma)
	admin, err := r.Runtimes.For(ctx, runtimeID)
	if err != nil || sr.Spec.Module == "" {
		// Without a module nothing may be written: every item is refused
		// before any call.
		return admin, grant, false, nil, err
	}
	// The module's workloads may run as the ServiceAccounts it created
	// through module-sync in this runtime (its SyncResources' inventory).
	// The runtime's SyncResources (a few), not the module's (one or more
	// per runtime of the fleet: a copy of each at every pass).
	mine := &v1alpha1.SyncResourceList{}
	if err := r.Client.List(ctx, mine, client.InNamespace(sr.Namespace), client.MatchingFields{kymaField: sr.Spec.Kyma}); err != nil {
		return nil, grant, false, nil, err
	}
	var ofRuntime []v1alpha1.SyncResource
	for i := range mine.Items {
		if mine.Items[i].Spec.Module == sr.Spec.Module && r.writerAllowed(grant, &mine.Items[i]) == nil {
			ofRuntime = append(ofRuntime, mine.Items[i])
		}
	}
	grant.ServiceAccounts = syncitems.ServiceAccounts(ofRuntime)
	if err := r.RBAC.Ensure(ctx, admin, r.Runtimes.Key(runtimeID), grant); err != nil {
		rbacErr = fmt.Errorf("the RBAC of module %s in the runtime: %w", grant.Module, err)
	}
	// Nothing is written as a module's user before the runtime's own API
	// server enforces the workload policy (just installed, its admission
	// takes it up within moments).
	probe, err := r.Runtimes.ForUser(ctx, runtimeID, grants.ProbeUser)
	if err == nil {
		err = r.RBAC.PolicyActive(ctx, probe, r.Runtimes.Key(runtimeID))
	}
	if err != nil && !errors.Is(err, grants.ErrWorkloadPolicyInactive) {
		return nil, grant, false, nil, &unreachable{err}
	}
	if err != nil {
		return nil, grant, false, nil, errors.Join(err, rbacErr)
	}
	skr, err = r.Runtimes.ForUser(ctx, runtimeID, grants.User(sr.Spec.Module))
	return skr, grant, false, rbacErr, err
}

// unreachable: the runtime did not answer module-sync's probe of its
// workload policy; the pass reports it as Apply reports an unreachable
// runtime (syncitems.Unreachable).
type unreachable struct{ err error }

func (u *unreachable) Error() string {
	return "the runtime cannot be reached: " + skrclient.Bounded(u.err.Error())
}
func (u *unreachable) Unwrap() error { return u.err }

// writerAllowed says whether sr's recorded writer may have it applied:
// named in its module's grant, or a platform writer (with a grant of the
// module all the same: without one nothing is written anyway).
func (r *Reconciler) writerAllowed(grant grants.Grant, sr *v1alpha1.SyncResource) error {
	writer := sr.Annotations[v1alpha1.AnnotationWrittenBy]
	if !grant.Found || sr.Spec.Module == "" {
		return nil // every item is refused by the grant check, naming why
	}
	for _, p := range r.PlatformWriters {
		if writer != "" && p == writer {
			return nil
		}
	}
	return grant.Writes(writer)
}

// grantOf is the grant of the SyncResource's module (none without
// spec.module).
func (r *Reconciler) grantOf(ctx context.Context, sr *v1alpha1.SyncResource) (grants.Grant, error) {
	if sr.Spec.Module == "" {
		g := grants.From(sr.Namespace, "", nil)
		g.Name = "ModuleGrant (spec.module is not set)"
		return g, nil
	}
	mg := &v1alpha1.ModuleGrant{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: sr.Namespace, Name: sr.Spec.Module}, mg)
	switch {
	case apierrors.IsNotFound(err):
		return grants.From(sr.Namespace, sr.Spec.Module, nil), nil
	case err != nil:
		return grants.Grant{}, err
	}
	return grants.From(sr.Namespace, sr.Spec.Module, mg), nil
}

func (r *Reconciler) finalize(ctx context.Context, key string, sr *v1alpha1.SyncResource) (reconcile.Result, error) {
	if !controllerutil.ContainsFinalizer(sr, Finalizer) {
		return reconcile.Result{}, nil
	}
	pass, cancel := context.WithTimeout(ctx, r.PassTimeout)
	defer cancel()
	skr, grant, kymaGone, rbacErr, err := r.skrOf(pass, sr)
	if err == nil {
		err = errors.Join(syncitems.Cleanup(pass, skr, grant, sr), rbacErr)
	}
	// Without its Kyma or its kubeconfig Secret the runtime is considered
	// gone (as vs-controller does): nothing left to remove.
	if err != nil && !kymaGone && !errors.Is(err, skrclient.ErrNoKubeconfig) {
		syncmetrics.SyncReconciles.WithLabelValues("retry").Inc()
		if werr := r.writeStatus(ctx, sr, sr.Status.Items, v1alpha1.StateDeleting, metav1.Condition{
			Type: syncitems.ConditionSynced, Status: metav1.ConditionFalse, Reason: "CleanupFailed", Message: skrclient.Bounded(err.Error()),
		}); werr != nil {
			return reconcile.Result{}, werr
		}
		return reconcile.Result{RequeueAfter: r.Backoff.When(key)}, nil
	}
	controllerutil.RemoveFinalizer(sr, Finalizer)
	if err := r.Client.Update(ctx, sr); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	syncmetrics.SyncReconciles.WithLabelValues("cleaned-up").Inc()
	r.Backoff.Forget(key)
	return reconcile.Result{}, nil
}

// writeStatus writes the status when it changed (a drift pass that changes
// nothing writes nothing).
func (r *Reconciler) writeStatus(ctx context.Context, sr *v1alpha1.SyncResource, items []v1alpha1.ItemStatus, state v1alpha1.State, cond metav1.Condition) error {
	cond.ObservedGeneration = sr.Generation
	old := meta.FindStatusCondition(sr.Status.Conditions, cond.Type)
	replica := r.Shards.Identity()
	if sr.Status.State == state && sr.Status.ObservedGeneration == sr.Generation && reflect.DeepEqual(sr.Status.Items, items) && sr.Status.Replica == replica &&
		old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return nil
	}
	now := metav1.Now()
	if r.now != nil {
		now = r.now()
	}
	sr = sr.DeepCopy()
	sr.Status.Items = items
	sr.Status.State = state
	sr.Status.ObservedGeneration = sr.Generation
	sr.Status.Replica = replica
	meta.SetStatusCondition(&sr.Status.Conditions, cond)
	sr.Status.LastOperation = &v1alpha1.LastOperation{Operation: fmt.Sprintf("%s: %s", cond.Reason, cond.Message), LastUpdateTime: now}
	if err := r.Client.Status().Update(ctx, sr); err != nil {
		return fmt.Errorf("status of SyncResource %s/%s: %w", sr.Namespace, sr.Name, err)
	}
	return nil
}

// deletionStarted passes updates that set the deletion timestamp.
type deletionStarted struct{ predicate.Funcs }

func (deletionStarted) Update(e event.UpdateEvent) bool {
	return e.ObjectOld.GetDeletionTimestamp() == nil && e.ObjectNew.GetDeletionTimestamp() != nil
}
func (deletionStarted) Create(event.CreateEvent) bool   { return false }
func (deletionStarted) Delete(event.DeleteEvent) bool   { return false }
func (deletionStarted) Generic(event.GenericEvent) bool { return false }

// kymaCreatedOrDeleted passes Kyma creations and deletions only.
type kymaCreatedOrDeleted struct{ predicate.Funcs }

func (kymaCreatedOrDeleted) Create(event.CreateEvent) bool   { return true }
func (kymaCreatedOrDeleted) Delete(event.DeleteEvent) bool   { return true }
func (kymaCreatedOrDeleted) Update(event.UpdateEvent) bool   { return false }
func (kymaCreatedOrDeleted) Generic(event.GenericEvent) bool { return false }
