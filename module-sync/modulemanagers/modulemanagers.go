// Package modulemanagers is module-sync's controller of module managers'
// authority in the KCP (docs/security.md, ARCHITECTURE §3.12 "Bound
// writers, all of them"): for every ModuleGrant it keeps the Role and
// RoleBinding of grants.ManagerRBAC, which give the users the grant names
// in spec.managers the verb grants.VerbManage on that grant alone. The
// KCP's writer policy asks the authorizer for that verb on every
// SyncResource write, so a manager whose grant is not installed yet, or no
// longer names it, is refused by the KCP API server itself. Deleting a grant
// deletes both (owner references; the garbage collector).
package modulemanagers

import (
	"context"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
)

// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=modulegrants,verbs=manage
// +kubebuilder:rbac:groups=rbac.authorization.k8s.io,namespace=kcp-system,resources=roles;rolebindings,verbs=get;list;watch;create;update;patch

// Reconciler keeps each ModuleGrant's managers' RBAC.
type Reconciler struct {
	// Client of the KCP.
	Client client.Client
}

// SetupWithManager registers the controller: a grant, and the Role or
// RoleBinding it owns (an edit is put back).
func (r *Reconciler) SetupWithManager(mgr ctrl.Manager) error {
	return ctrl.NewControllerManagedBy(mgr).
		Named("module-managers").
		For(&v1alpha1.ModuleGrant{}).
		Owns(&rbacv1.Role{}).
		Owns(&rbacv1.RoleBinding{}).
		Complete(r)
}

// Reconcile writes the grant's managers' Role and RoleBinding.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mg := &v1alpha1.ModuleGrant{}
	if err := r.Client.Get(ctx, req.NamespacedName, mg); err != nil {
		if apierrors.IsNotFound(err) {
			return reconcile.Result{}, nil // its RBAC goes with it (owner references)
		}
		return reconcile.Result{}, err
	}
	if !mg.DeletionTimestamp.IsZero() {
		return reconcile.Result{}, nil
	}
	return reconcile.Result{}, grants.KeepManagerRBAC(ctx, r.Client, mg)
}
