package grants

import (
	"context"
	"fmt"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
)

// VerbManage is the RBAC verb on modulegrants/<module> that lets a KCP user
// write (create, or change the spec of) SyncResources of that module: the
// KCP's ValidatingAdmissionPolicy
// manifests/kcp/base/syncresource-writer-policy.yaml asks the authorizer
// for it on every such write, so a writer that no grant names writes no
// SyncResource at all (ARCHITECTURE §3.12, "Bound writers, all of them").
// The managers a ModuleGrant names get it through ManagerRBAC; the
// platform's own writers through the ClusterRole
// runtime-watcher-syncresource-platform-writer (and cluster admins have
// every verb).
const VerbManage = "manage"

// managersFieldManager writes the managers' RBAC in the KCP.
const managersFieldManager = "module-sync-managers"

// ManagerRBACName names the Role and the RoleBinding that carry a module's
// managers' VerbManage, in the grant's namespace.
func ManagerRBACName(module string) string { return "module-manager." + module }

// ManagerRBAC is what a ModuleGrant's managers hold in the KCP: a Role with
// VerbManage on exactly modulegrants/<module>, bound to the users in
// spec.managers (no subject when it names none), both owned by the grant so
// that deleting the grant (the garbage collector) takes them away.
func ManagerRBAC(mg *v1alpha1.ModuleGrant) (*rbacv1.Role, *rbacv1.RoleBinding) {
	name := ManagerRBACName(mg.Name)
	meta := metav1.ObjectMeta{
		Name: name, Namespace: mg.Namespace,
		Labels: map[string]string{LabelManagedBy: ManagedBy, LabelModule: mg.Name},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: v1alpha1.GroupVersion.String(), Kind: "ModuleGrant", Name: mg.Name, UID: mg.UID,
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(false),
		}},
	}
	role := &rbacv1.Role{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "Role"},
		ObjectMeta: meta,
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"modulegrants"},
			ResourceNames: []string{mg.Name}, Verbs: []string{VerbManage},
		}},
	}
	binding := &rbacv1.RoleBinding{
		TypeMeta:   metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: "RoleBinding"},
		ObjectMeta: *meta.DeepCopy(),
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
		Subjects:   []rbacv1.Subject{},
	}
	for _, u := range mg.Spec.Managers {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: u})
	}
	return role, binding
}

// KeepManagerRBAC writes ManagerRBAC(mg) into the KCP (server-side apply,
// so a change of spec.managers, or an edit by somebody else, is put back).
func KeepManagerRBAC(ctx context.Context, kcp client.Client, mg *v1alpha1.ModuleGrant) error {
	role, binding := ManagerRBAC(mg)
	for _, o := range []client.Object{role, binding} {
		if err := apply(ctx, kcp, o, managersFieldManager); err != nil {
			return fmt.Errorf("write %s %s/%s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}
