package modulemanagers_test

import (
	"context"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/modulemanagers"
)

// TestManagersGetTheVerbOnTheirGrantOnly: the Role gives manage on the
// grant alone, the RoleBinding names exactly spec.managers, both owned by
// the grant; a grant that drops a manager drops it from the binding.
func TestManagersGetTheVerbOnTheirGrantOnly(t *testing.T) {
	ctx := context.Background()
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	mg := &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: "sample", Namespace: "kcp-system", UID: "uid-1"},
		Spec: v1alpha1.ModuleGrantSpec{Managers: []string{"alice", "system:serviceaccount:kcp-system:bob"}}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(mg).Build()
	r := &modulemanagers.Reconciler{Client: c}
	req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(mg)}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	key := client.ObjectKey{Namespace: "kcp-system", Name: grants.ManagerRBACName("sample")}
	role, binding := &rbacv1.Role{}, &rbacv1.RoleBinding{}
	if err := c.Get(ctx, key, role); err != nil {
		t.Fatal(err)
	}
	if len(role.Rules) != 1 || role.Rules[0].Resources[0] != "modulegrants" || len(role.Rules[0].ResourceNames) != 1 ||
		role.Rules[0].ResourceNames[0] != "sample" || len(role.Rules[0].Verbs) != 1 || role.Rules[0].Verbs[0] != grants.VerbManage {
		t.Errorf("Role rules %+v, want manage on modulegrants/sample only", role.Rules)
	}
	subjects := func() []string {
		t.Helper()
		if err := c.Get(ctx, key, binding); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, s := range binding.Subjects {
			if s.Kind != rbacv1.UserKind {
				t.Errorf("subject %+v is no User", s)
			}
			out = append(out, s.Name)
		}
		return out
	}
	if got := subjects(); len(got) != 2 || got[0] != "alice" || got[1] != "system:serviceaccount:kcp-system:bob" {
		t.Errorf("subjects %v, want the grant's managers", got)
	}
	if binding.RoleRef.Name != key.Name {
		t.Errorf("RoleRef %+v", binding.RoleRef)
	}
	for _, o := range []client.Object{role, binding} {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != mg.UID || refs[0].Kind != "ModuleGrant" {
			t.Errorf("%T owner references %+v, want the grant", o, refs)
		}
	}

	mg.Spec.Managers = []string{"alice"}
	if err := c.Update(ctx, mg); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Reconcile(ctx, req); err != nil {
		t.Fatal(err)
	}
	if got := subjects(); len(got) != 1 || got[0] != "alice" {
		t.Errorf("after the grant dropped bob: subjects %v", got)
	}
	// A grant that is gone: nothing to write (the garbage collector takes
	// its RBAC), no error.
	if _, err := r.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKey{Namespace: "kcp-system", Name: "gone"}}); err != nil {
		t.Error(err)
	}
}
