package runtimes

import (
	"context"
	"maps"
	"sync/atomic"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// SetupWithManager registers the controller and an index of Kymas by
// runtime ID.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.KymaNamespace == "" {
		r.KymaNamespace = DefaultKymaNamespace
	}
	if r.Clients == nil {
		r.Clients = SKRClients()
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = defaultWorkers
	}
	if r.WatcherDebounce == 0 {
		r.WatcherDebounce = defaultWatcherDebunce
	}
	if r.Resync == 0 {
		r.Resync = defaultResync
	}
	if r.KubeconfigRetry <= 0 {
		r.KubeconfigRetry = defaultKubeconfigRetry
	}
	if r.TakeOver == nil {
		r.TakeOver = &takeover.TakeOver{Options: r.Adoption, Client: r.Client, APIReader: r.APIReader,
			Recorder: r.Recorder, Bundle: r.Bundle, SKR: skrBundle{r}, Resync: r.Resync}
	}
	if err := identity.IndexRuntimeID(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.KymaNamespace })
	b := ctrl.NewControllerManagedBy(mgr)
	opts := controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}
	if r.Shards != nil {
		// Every replica reconciles the runtimes it owns; gained ones at
		// once.
		opts.NeedLeaderElection = ptr.To(false)
		r.Shards.OnChange(r.gained)
		b = b.WatchesRawSource(r.requeue.Source())
	}
	if r.Trust != nil {
		// A changed trust bundle re-reconciles every runtime.
		r.Trust.Init(r.Client, r.KymaNamespace)
		if r.Shards != nil {
			// The keeper runs on every replica: the elected one keeps
			// the bundles, the others follow (trust.Keeper.Follow).
			r.Trust.Elected = mgr.Elected()
		}
		if err := mgr.Add(r.Trust); err != nil {
			return err
		}
		b = b.WatchesRawSource(source.Channel[client.Object](r.Trust.Changed(), &allKymas{r: r}))
	}
	return b.
		Named(ControllerName).
		For(NewKyma(), builder.WithPredicates(inNamespace, predicate.Funcs{UpdateFunc: kymaChanged})).
		// Owns() needs the owner kind in the scheme; the Kyma is read as
		// metadata only, so map the controller reference by hand.
		Watches(&certmanagerv1.Certificate{}, handler.EnqueueRequestsFromMapFunc(kymaOwner), builder.WithPredicates(inNamespace, predicate.Funcs{UpdateFunc: certificateChanged})).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.kymasForSecret), builder.WithPredicates(inNamespace)).
		Watches(&v1beta2.Watcher{}, &allKymas{r: r}, builder.WithPredicates(predicate.Funcs{UpdateFunc: watcherChanged})).
		// Who holds a route: vs-controller's VirtualServices (created for
		// the route's owner, deleted from a loser), not Watcher status.
		Watches(&istionetworkingv1.VirtualService{}, &allKymas{r: r}, builder.WithPredicates(routeHolderChanged{})).
		WithOptions(opts).
		Complete(r)
}

// gained enqueues the runtimes this replica gained, drops the runtime
// clients of those another replica owns now (their connections and REST
// mappers; the elected replica's health checks build one again when they
// need it) and counts those it owns
// (runtime_watcher_shard_owned_runtimes{group="vs-controller"}).
func (r *Reconciler) gained(gained func(runtime string) bool) error {
	if !r.requeue.Started() {
		return nil // its start enqueues every Kyma, and its passes ask the owner
	}
	list := newKymaList()
	if err := r.Client.List(context.Background(), list, client.InNamespace(r.KymaNamespace)); err != nil {
		return err
	}
	owned := 0
	for i := range list.Items {
		key := client.ObjectKeyFromObject(&list.Items[i])
		if r.Shards.Owns(key.String()) {
			owned++
		}
		if gained(key.String()) {
			r.requeue.Add(reconcile.Request{NamespacedName: key})
		} else if r.Shards.Elsewhere(key.String()) {
			r.Clients.Forget(key.String())
		}
	}
	r.Shards.SetOwned(owned)
	return nil
}

// kymaOwner maps a Certificate to the Kyma that controls it.
func kymaOwner(_ context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != kymaGVK.Kind || ref.APIVersion != kymaGVK.GroupVersion().String() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// kymaChanged passes Kyma updates that matter here: deletion, skr-domain,
// runtime ID, our finalizer, LM's skip-reconciliation label (package
// takeover).
func kymaChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		o.GetAnnotations()[contract.AnnotationSKRDomain] != n.GetAnnotations()[contract.AnnotationSKRDomain] ||
		RuntimeID(o) != RuntimeID(n) ||
		o.GetLabels()[takeover.SkipReconciliationLabel] != n.GetLabels()[takeover.SkipReconciliationLabel] ||
		controllerutil.ContainsFinalizer(o, Finalizer) != controllerutil.ContainsFinalizer(n, Finalizer)
}

// certificateChanged passes Certificate updates but those that only record
// the trust evidence (trust.AnnotationEvidence, written by the pass itself).
func certificateChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	if o.GetAnnotations()[trust.AnnotationEvidence] == n.GetAnnotations()[trust.AnnotationEvidence] {
		return true
	}
	oc, ok1 := o.(*certmanagerv1.Certificate)
	nc, ok2 := n.(*certmanagerv1.Certificate)
	if !ok1 || !ok2 || oc.Generation != nc.Generation || !equality.Semantic.DeepEqual(oc.Status, nc.Status) ||
		!equality.Semantic.DeepEqual(oc.Labels, nc.Labels) || !equality.Semantic.DeepEqual(oc.OwnerReferences, nc.OwnerReferences) ||
		(oc.DeletionTimestamp == nil) != (nc.DeletionTimestamp == nil) {
		return true
	}
	oa, na := maps.Clone(oc.Annotations), maps.Clone(nc.Annotations)
	delete(oa, trust.AnnotationEvidence)
	delete(na, trust.AnnotationEvidence)
	return !maps.Equal(oa, na)
}

// watcherChanged passes Watcher updates that can change a webhook: spec
// (generation), labels (managed-by), deletion. Whether it holds its route
// is its VirtualService's (routeHolderChanged), never its status's.
func watcherChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		o.GetLabels()[contract.LabelManagedBy] != n.GetLabels()[contract.LabelManagedBy]
}

// routeHolderChanged passes VirtualServices that appear or go, or whose
// controller changes: a Watcher gained or lost its route.
type routeHolderChanged struct{ predicate.Funcs }

func (routeHolderChanged) Create(event.CreateEvent) bool   { return true }
func (routeHolderChanged) Delete(event.DeleteEvent) bool   { return true }
func (routeHolderChanged) Generic(event.GenericEvent) bool { return false }
func (routeHolderChanged) Update(e event.UpdateEvent) bool {
	o, n := metav1.GetControllerOf(e.ObjectOld), metav1.GetControllerOf(e.ObjectNew)
	return (o == nil) != (n == nil) || (o != nil && n != nil && o.UID != n.UID)
}

// kymasForSecret maps a kubeconfig Secret or a Certificate Secret to the
// Kyma of its runtime, found as identity.NewKymaLookup finds it.
func (r *Reconciler) kymasForSecret(ctx context.Context, s client.Object) []reconcile.Request {
	id, ok := skrclient.RuntimeIDOfSecret(s.GetName())
	if !ok {
		if id, ok = certificates.RuntimeIDOfSecret(s.GetName()); !ok {
			return nil
		}
	}
	rt, found, err := identity.NewKymaLookup(r.Client, r.KymaNamespace).LookupRuntime(ctx, id)
	if err != nil || !found {
		if err != nil {
			log.FromContext(ctx).Error(err, "look up the Kyma for a Secret event")
		}
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: r.KymaNamespace, Name: rt.KymaName}}}
}

// allKymas enqueues every Kyma on a Watcher event, after the debounce delay
// so that a burst of Watcher changes costs one pass per runtime. The burst
// also costs one fan-out: while one is scheduled, further Watcher events
// add nothing (it lists the Kymas when it runs). Before, every event listed
// every Kyma and called AddAfter for each (which client-go counts as a
// workqueue retry): 1,000 Watchers created × 500 runtimes were 500,000
// "retries" and 1,000 Kyma lists in the first seconds.
type allKymas struct {
	r         *Reconciler
	scheduled atomic.Bool
}

func (h *allKymas) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	if h.r.WatcherDebounce <= 0 {
		h.fanOut(ctx, q)
		return
	}
	if !h.scheduled.CompareAndSwap(false, true) {
		return // the scheduled fan-out covers this event
	}
	time.AfterFunc(h.r.WatcherDebounce, func() {
		h.scheduled.Store(false) // events from now on need another fan-out
		h.fanOut(ctx, q)
	})
}

func (h *allKymas) fanOut(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	list := newKymaList()
	if err := h.r.Client.List(ctx, list, client.InNamespace(h.r.KymaNamespace)); err != nil {
		log.FromContext(ctx).Error(err, "list Kymas for a Watcher event")
		return
	}
	for i := range list.Items {
		key := client.ObjectKeyFromObject(&list.Items[i])
		if h.r.Shards != nil && !h.r.Shards.Owns(key.String()) {
			continue // its owner's fan-out enqueues it there
		}
		q.Add(reconcile.Request{NamespacedName: key})
	}
}

func (h *allKymas) Create(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Update(ctx context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Delete(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Generic(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}
