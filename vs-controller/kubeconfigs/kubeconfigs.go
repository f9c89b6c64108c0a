// Package kubeconfigs keeps module-sync's read access to the runtimes'
// kubeconfig Secrets as narrow as the runtimes (docs/security.md, "Least
// privilege: the Secrets module-sync holds"): the Role RoleName in the Kyma
// namespace grants get on exactly the Secrets kubeconfig-<runtime-id> of
// the Kymas there, by resourceNames, and nothing else. vs-controller,
// which knows the runtimes, rewrites it whenever a Kyma comes, goes or
// changes its runtime ID; the RoleBinding to module-sync's ServiceAccount
// is static (manifests/kcp/base/module-sync-rbac.yaml). RBAC cannot narrow
// list or watch by name, so module-sync reads each kubeconfig Secret by
// name and caches none.
package kubeconfigs

import (
	"context"
	"fmt"
	"sort"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

// RoleName is the Role (in the Kyma namespace) that lets module-sync read
// the runtimes' kubeconfig Secrets.
const RoleName = "module-sync-kubeconfigs"

// FieldOwner is the server-side apply field manager of the Role.
const FieldOwner = "vs-controller-kubeconfigs"

// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,namespace=kcp-system,resources=roles,verbs=get;list;watch;create;update;patch

// Reconciler writes the Role RoleName from the Kymas of KymaNamespace.
type Reconciler struct {
	Client        client.Client
	KymaNamespace string
}

// SetupWithManager registers the controller: every Kyma event (and a
// change of the Role itself, to repair it) reconciles the one Role.
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	one := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: r.KymaNamespace, Name: RoleName}}}
	})
	inNS := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.KymaNamespace })
	return ctrl.NewControllerManagedBy(mgr).
		Named("module-sync-kubeconfigs").
		WatchesMetadata(identity.NewKyma(), one, builder.WithPredicates(inNS)).
		Watches(&rbacv1.Role{}, one, builder.WithPredicates(inNS, predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetName() == RoleName }))).
		Complete(r)
}

// Reconcile writes the Role.
func (r *Reconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	kymas := identity.NewKymaList()
	if err := r.Client.List(ctx, kymas, client.InNamespace(r.KymaNamespace)); err != nil {
		return reconcile.Result{}, err
	}
	role, err := diffapply.Desired(Desired(r.KymaNamespace, kymas.Items), rbacv1.SchemeGroupVersion.WithKind("Role"))
	if err != nil {
		return reconcile.Result{}, err
	}
	if _, err := diffapply.Apply(ctx, r.Client, FieldOwner, role); err != nil {
		return reconcile.Result{}, fmt.Errorf("write Role %s/%s: %w", r.KymaNamespace, RoleName, err)
	}
	return reconcile.Result{}, nil
}

// Desired is the Role for the Kymas: get on the kubeconfig Secret of each
// (not being deleted or not: a Kyma's runtime is cleaned up through it),
// sorted; no rule at all without a Kyma.
func Desired(namespace string, kymas []metav1.PartialObjectMetadata) *rbacv1.Role {
	seen := map[string]bool{}
	var names []string
	for i := range kymas {
		n := skrclient.SecretName(identity.RuntimeIDOf(&kymas[i]))
		if !seen[n] {
			seen[n] = true
			names = append(names, n)
		}
	}
	sort.Strings(names)
	role := &rbacv1.Role{
		TypeMeta: metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: metav1.ObjectMeta{Name: RoleName, Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "module-sync", "app.kubernetes.io/managed-by": FieldOwner}},
		Rules: []rbacv1.PolicyRule{},
	}
	if len(names) > 0 {
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: names, Verbs: []string{"get"}})
	}
	return role
}
