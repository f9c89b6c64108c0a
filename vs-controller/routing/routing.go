// Package routing is vs-controller's Watcher reconciler (docs/architecture.md
// §3.5): for every Watcher CR it keeps one Istio VirtualService, with the same
// name and namespace, that routes POST /v2/<manager>/event from the Gateways
// the Watcher selects to the operator's listener Service. It reports the
// outcome in the Watcher's status and in Kubernetes Events. A route (Gateway +
// /v2/<manager>/event) belongs to the oldest Watcher claiming it, in any
// namespace; later claimants get state Error, reason RouteConflict and no
// VirtualService until the owner goes (ownership.go; the rules of who holds
// a route are package routeowner's).
package routing

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"
	istioapiv1 "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/events"
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

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

const (
	// Finalizer on Watchers: the VirtualService is deleted before the
	// Watcher goes away.
	Finalizer = "operator.kyma-project.io/watcher"
	// ControllerName names the controller (logs, metrics).
	ControllerName = "watcher-virtualservice"
	// DefaultGatewayNamespace is where the selected Istio Gateways live.
	DefaultGatewayNamespace = "istio-system"
	// LifecycleManagerGatewayNamespace is Lifecycle Manager's default for
	// the same setting (its --istio-gateway-namespace, Gateway
	// kcp-system/klm-watcher). A take-over that keeps LM's Gateway sets
	// vs-controller's --gateway-namespace to it (docs/crd-versions.md).
	LifecycleManagerGatewayNamespace = "kcp-system"

	// Condition reasons (also Event reasons) of the condition
	// routeowner.ConditionVirtualService, beside routeowner.ReasonApplied
	// and routeowner.ReasonRouteConflict.
	ReasonNoGateway      = "NoGatewayMatches"
	ReasonNoHosts        = "GatewaysHaveNoHosts"
	ReasonInvalidSpec    = "InvalidSpec"
	ReasonApplyFailed    = "ApplyFailed"
	ReasonDeleteFailed   = "DeleteFailed"
	ReasonGatewayListErr = "GatewayListFailed"

	clusterLocalSuffix = ".svc.cluster.local"
	virtualServiceKind = "VirtualService"
	watcherKind        = "Watcher"
	routeNamePrefix    = "watcher-"
	// maxGateways bounds the Gateways one Watcher may select.
	maxGateways = 100
)

var virtualServiceGVK = istionetworkingv1.SchemeGroupVersion.WithKind(virtualServiceKind)

// Reconciler keeps the VirtualService of every Watcher.
type Reconciler struct {
	Client   client.Client
	Recorder events.EventRecorder
	// GatewayNamespace is where the Gateways selected by
	// spec.gateway.selector are looked up.
	GatewayNamespace string
	// MaxConcurrentReconciles of the controller; 4 when 0.
	MaxConcurrentReconciles int
}

// RBAC (make manifests -> manifests/kcp/rbac/role.yaml): Gateways
// cluster-wide, as --gateway-namespace is a flag; the leader-election Lease
// is granted by the hand-written Role in manifests/kcp/base. The verb bind
// on the Gateways of istio-system is what the route policy
// (manifests/kcp/base/gateway-routes-policy.yaml) asks of whoever binds a
// VirtualService to the watcher Gateway.
// +kubebuilder:rbac:groups=operator.kyma-project.io,resources=watchers,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=operator.kyma-project.io,resources=watchers/status,verbs=get;patch
// +kubebuilder:rbac:groups=operator.kyma-project.io,resources=watchers/finalizers,verbs=update
// +kubebuilder:rbac:groups=networking.istio.io,resources=virtualservices,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=networking.istio.io,resources=gateways,verbs=get;list;watch
// +kubebuilder:rbac:groups=networking.istio.io,namespace=istio-system,resources=gateways,verbs=bind
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// SetupWithManager registers the controller: Watchers (spec, labels and
// deletion), their owned VirtualServices (hand edits are repaired) and the
// Gateways of the gateway namespace (each change re-reconciles the Watchers
// whose selector matches the Gateway's old or new labels).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.GatewayNamespace == "" {
		r.GatewayNamespace = DefaultGatewayNamespace
	}
	workers := r.MaxConcurrentReconciles
	if workers == 0 {
		workers = 4
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(&v1beta2.Watcher{}, builder.WithPredicates(predicate.Or[client.Object](
			predicate.GenerationChangedPredicate{}, predicate.LabelChangedPredicate{}, routeConditionChanged{}))).
		Owns(&istionetworkingv1.VirtualService{}).
		Watches(&istionetworkingv1.Gateway{}, handler.EnqueueRequestsFromMapFunc(r.watchersForGateway)).
		// Route ownership: a Watcher's change may hand its route to another.
		Watches(&v1beta2.Watcher{}, r.claimants()).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// routeConditionChanged passes Watcher updates that change the route
// condition: vs-controller writes it, so a change it did not make (anyone
// who may write watchers/status) is put back at once. Its own writes pass
// too and find nothing to do.
type routeConditionChanged struct{ predicate.Funcs }

func (routeConditionChanged) Create(event.CreateEvent) bool   { return false }
func (routeConditionChanged) Delete(event.DeleteEvent) bool   { return false }
func (routeConditionChanged) Generic(event.GenericEvent) bool { return false }
func (routeConditionChanged) Update(e event.UpdateEvent) bool {
	o, ok1 := e.ObjectOld.(*v1beta2.Watcher)
	n, ok2 := e.ObjectNew.(*v1beta2.Watcher)
	if !ok1 || !ok2 {
		return false
	}
	oc := meta.FindStatusCondition(o.Status.Conditions, routeowner.ConditionVirtualService)
	nc := meta.FindStatusCondition(n.Status.Conditions, routeowner.ConditionVirtualService)
	if oc == nil || nc == nil {
		return oc != nc
	}
	return oc.Status != nc.Status || oc.Reason != nc.Reason || oc.Message != nc.Message ||
		oc.ObservedGeneration != nc.ObservedGeneration || o.Status.State != n.Status.State
}

// watchersForGateway maps a Gateway to the Watchers selecting it.
func (r *Reconciler) watchersForGateway(ctx context.Context, gw client.Object) []reconcile.Request {
	if gw.GetNamespace() != r.GatewayNamespace {
		return nil
	}
	var list v1beta2.WatcherList
	if err := r.Client.List(ctx, &list); err != nil {
		log.FromContext(ctx).Error(err, "list Watchers for a Gateway event")
		return nil
	}
	set := labels.Set(gw.GetLabels())
	var reqs []reconcile.Request
	for i := range list.Items {
		w := &list.Items[i]
		sel, err := metav1.LabelSelectorAsSelector(&w.Spec.Gateway.LabelSelector)
		if err != nil || !sel.Matches(set) {
			continue
		}
		reqs = append(reqs, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(w)})
	}
	return reqs
}

// Reconcile brings one Watcher's VirtualService and status up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	w := &v1beta2.Watcher{}
	if err := r.Client.Get(ctx, req.NamespacedName, w); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if w.DeletionTimestamp != nil {
		return ctrl.Result{}, r.finalize(ctx, w)
	}
	if !controllerutil.ContainsFinalizer(w, Finalizer) {
		orig := w.DeepCopy()
		controllerutil.AddFinalizer(w, Finalizer)
		if err := r.Client.Patch(ctx, w, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		vsmetrics.WatcherWrites.WithLabelValues("watcher-finalizer").Inc()
	}

	vs, reason, err := r.desired(ctx, w)
	if err != nil {
		if reason == ReasonInvalidSpec {
			// A Watcher that cannot be routed keeps no route: its old
			// VirtualService (from an earlier, valid spec) goes.
			if derr := r.deleteVirtualService(ctx, w); derr != nil {
				return ctrl.Result{}, errors.Join(r.fail(ctx, w, reason, err), derr)
			}
		}
		return ctrl.Result{}, r.fail(ctx, w, reason, err)
	}
	owner, gateway, err := r.routeOwner(ctx, w, vs.Spec.Gateways)
	if err != nil {
		return ctrl.Result{}, r.fail(ctx, w, ReasonGatewayListErr, err)
	}
	if owner != nil {
		// Not ours to route: no VirtualService (an earlier one goes).
		vsmetrics.VirtualServiceReconciles.WithLabelValues("route-conflict").Inc()
		if derr := r.deleteVirtualService(ctx, w); derr != nil {
			return ctrl.Result{}, errors.Join(r.fail(ctx, w, routeowner.ReasonRouteConflict, conflictError(w, owner, gateway)), derr)
		}
		return ctrl.Result{}, r.fail(ctx, w, routeowner.ReasonRouteConflict, conflictError(w, owner, gateway))
	}
	desired, err := diffapply.Desired(vs, virtualServiceGVK)
	if err != nil {
		return ctrl.Result{}, err
	}
	var live client.Object
	cur := &istionetworkingv1.VirtualService{}
	switch err := r.Client.Get(ctx, req.NamespacedName, cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return ctrl.Result{}, err
	default:
		live = cur
	}
	wrote, err := diffapply.Ensure(ctx, r.Client, diffapply.FieldOwner, desired, live)
	if err != nil {
		vsmetrics.VirtualServiceReconciles.WithLabelValues("apply-failed").Inc()
		return ctrl.Result{}, r.fail(ctx, w, ReasonApplyFailed, err)
	}
	if wrote {
		vsmetrics.WatcherWrites.WithLabelValues("virtualservice").Inc()
		vsmetrics.VirtualServiceReconciles.WithLabelValues("applied").Inc()
	} else {
		vsmetrics.VirtualServiceReconciles.WithLabelValues("unchanged").Inc()
	}
	return ctrl.Result{}, r.setStatus(ctx, w, v1beta2.StateReady, metav1.ConditionTrue, routeowner.ReasonApplied,
		fmt.Sprintf("VirtualService routes %s through %d Gateway(s)", contract.EventPath(w.ManagerName()), len(vs.Spec.Gateways)))
}

// desired is the VirtualService of a Watcher, or the reason it cannot be
// built.
func (r *Reconciler) desired(ctx context.Context, w *v1beta2.Watcher) (*istionetworkingv1.VirtualService, string, error) {
	// The CRD accepts every Watcher Lifecycle Manager's CRD accepts; what
	// cannot be routed is reported here, all of it at once.
	if problems := w.SpecProblems(); len(problems) > 0 {
		return nil, ReasonInvalidSpec, errors.New("invalid spec: " + strings.Join(problems, "; "))
	}
	manager := w.ManagerName()
	si := w.Spec.ServiceInfo
	sel, err := metav1.LabelSelectorAsSelector(&w.Spec.Gateway.LabelSelector)
	if err != nil {
		return nil, ReasonInvalidSpec, fmt.Errorf("spec.gateway.selector: %w", err)
	}
	var gws istionetworkingv1.GatewayList
	if err := r.Client.List(ctx, &gws, client.InNamespace(r.GatewayNamespace), client.MatchingLabelsSelector{Selector: sel}); err != nil {
		return nil, ReasonGatewayListErr, err
	}
	if len(gws.Items) == 0 {
		return nil, ReasonNoGateway, fmt.Errorf("no Gateway in namespace %s (vs-controller's --gateway-namespace; Lifecycle Manager's default is %s) matches spec.gateway.selector %q",
			r.GatewayNamespace, LifecycleManagerGatewayNamespace, sel.String())
	}
	if len(gws.Items) > maxGateways {
		return nil, ReasonInvalidSpec, fmt.Errorf("spec.gateway.selector matches %d Gateways, more than %d", len(gws.Items), maxGateways)
	}
	gateways := make([]string, 0, len(gws.Items))
	hostSet := map[string]struct{}{}
	for _, gw := range gws.Items {
		gateways = append(gateways, gw.Namespace+"/"+gw.Name)
		for _, s := range gw.Spec.GetServers() {
			for _, h := range s.GetHosts() {
				hostSet[h] = struct{}{}
			}
		}
	}
	if len(hostSet) == 0 {
		return nil, ReasonNoHosts, fmt.Errorf("the Gateways %v have no server hosts", gateways)
	}
	hosts := make([]string, 0, len(hostSet))
	for h := range hostSet {
		hosts = append(hosts, h)
	}
	sort.Strings(hosts)
	sort.Strings(gateways)

	vs := &istionetworkingv1.VirtualService{
		ObjectMeta: metav1.ObjectMeta{
			Name:      w.Name,
			Namespace: w.Namespace,
			OwnerReferences: []metav1.OwnerReference{
				*metav1.NewControllerRef(w, v1beta2.GroupVersion.WithKind(watcherKind)),
			},
		},
	}
	vs.Spec.Gateways = gateways
	vs.Spec.Hosts = hosts
	vs.Spec.Http = []*istioapiv1.HTTPRoute{{
		Name: routeNamePrefix + manager,
		Match: []*istioapiv1.HTTPMatchRequest{{
			Uri: &istioapiv1.StringMatch{MatchType: &istioapiv1.StringMatch_Prefix{Prefix: contract.EventPath(manager)}},
		}},
		Route: []*istioapiv1.HTTPRouteDestination{{
			Destination: &istioapiv1.Destination{
				Host: si.Name + "." + si.Namespace + clusterLocalSuffix,
				Port: &istioapiv1.PortSelector{Number: uint32(si.Port)},
			},
		}},
		Retries: eventRetries(),
	}}
	return vs, "", nil
}

// eventRetries: the gateway retries an event at once on another replica
// of the operator (Istio's retry host predicate previous_hosts) when a
// replica answered 503 — it is not the leader, or with shards (module-sync
// --shard-identity) not the runtime's owner — or could not be reached. A
// 503 means "not delivered" (§3.8), so a retry never delivers twice.
// Without it the webhook retries after Retry-After (1 s) and, the gateway
// balancing at random, reaches the owner of a 3-replica Deployment on the
// first try one time in three.
func eventRetries() *istioapiv1.HTTPRetry {
	return &istioapiv1.HTTPRetry{
		Attempts: 4,
		RetryOn:  "connect-failure,refused-stream,503",
		Backoff:  durationpb.New(5 * time.Millisecond),
	}
}

// fail records a failure in the status (and an Event when the status
// changes) and returns err for a retry when it may be transient.
func (r *Reconciler) fail(ctx context.Context, w *v1beta2.Watcher, reason string, cause error) error {
	if err := r.setStatus(ctx, w, v1beta2.StateError, metav1.ConditionFalse, reason, cause.Error()); err != nil {
		return errors.Join(cause, err)
	}
	switch reason {
	case ReasonApplyFailed, ReasonGatewayListErr:
		return cause
	default:
		// A spec or Gateway problem: the next Watcher or Gateway change
		// triggers the next attempt.
		log.FromContext(ctx).Info("Watcher cannot be routed", "reason", reason, "message", cause.Error())
		return nil
	}
}

// setStatus writes the status when it changed, and records an Event when
// the condition changed.
func (r *Reconciler) setStatus(ctx context.Context, w *v1beta2.Watcher, state v1beta2.State, status metav1.ConditionStatus, reason, msg string) error {
	next := w.Status.DeepCopy()
	next.State = state
	next.ObservedGeneration = w.Generation
	changed := meta.SetStatusCondition(&next.Conditions, metav1.Condition{
		Type: routeowner.ConditionVirtualService, Status: status, Reason: reason, Message: msg, ObservedGeneration: w.Generation,
	})
	if equality.Semantic.DeepEqual(&w.Status, next) {
		return nil
	}
	orig := w.DeepCopy()
	w.Status = *next
	if err := r.Client.Status().Patch(ctx, w, client.MergeFrom(orig)); err != nil {
		return fmt.Errorf("update status: %w", err)
	}
	vsmetrics.WatcherWrites.WithLabelValues("watcher-status").Inc()
	if changed && r.Recorder != nil {
		typ := corev1.EventTypeNormal
		if status != metav1.ConditionTrue {
			typ = corev1.EventTypeWarning
		}
		r.Recorder.Eventf(w, nil, typ, reason, "Route", "%s", msg)
	}
	return nil
}

// finalize deletes the Watcher's VirtualService and removes the finalizer.
func (r *Reconciler) finalize(ctx context.Context, w *v1beta2.Watcher) error {
	if !controllerutil.ContainsFinalizer(w, Finalizer) {
		return nil
	}
	if err := r.deleteVirtualService(ctx, w); err != nil {
		return err
	}
	orig := w.DeepCopy()
	controllerutil.RemoveFinalizer(w, Finalizer)
	if err := r.Client.Patch(ctx, w, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	vsmetrics.WatcherWrites.WithLabelValues("watcher-finalizer").Inc()
	return nil
}

// deleteVirtualService deletes the Watcher's VirtualService if the Watcher
// owns it: as controller (ours) or by a plain owner reference (Lifecycle
// Manager's, taken over).
func (r *Reconciler) deleteVirtualService(ctx context.Context, w *v1beta2.Watcher) error {
	vs := &istionetworkingv1.VirtualService{}
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(w), vs); {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return err
	}
	if !ownedBy(vs, w) {
		return nil
	}
	uid := vs.UID
	if err := r.Client.Delete(ctx, vs, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
		if r.Recorder != nil {
			r.Recorder.Eventf(w, nil, corev1.EventTypeWarning, ReasonDeleteFailed, "Delete", "%s", err.Error())
		}
		return fmt.Errorf("delete VirtualService: %w", err)
	}
	vsmetrics.WatcherWrites.WithLabelValues("virtualservice-delete").Inc()
	vsmetrics.VirtualServiceReconciles.WithLabelValues("deleted").Inc()
	return nil
}

// ownedBy reports whether obj has an owner reference to owner.
func ownedBy(obj, owner metav1.Object) bool {
	for _, ref := range obj.GetOwnerReferences() {
		if ref.UID == owner.GetUID() {
			return true
		}
	}
	return false
}
