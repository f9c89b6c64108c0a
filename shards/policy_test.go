package shards

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/testr"
	"github.com/onsi/gomega"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestLeasePolicy: the ValidatingAdmissionPolicy of
// manifests/kcp/base/shard-lease-policy.yaml on a real API server, with the
// RBAC of the manifests' leader-election Role. An operator deployed in the
// members' namespace, which holds Lease write there for its own leader
// election, cannot create, change or delete a member Lease (issue 40: one
// forged Lease stopped all sharded work); module-sync's ServiceAccount
// writes its own group's Leases, under its holder's name only, and no
// other group's; a real member acting as it works.
func TestLeasePolicy(t *testing.T) {
	testenv.SkipIfShort(t)
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kcp := env.Cluster("kcp")
	ctx := context.Background()
	g := gomega.NewWithT(t)
	const ns = "kcp-system"
	admin := kubernetes.NewForConfigOrDie(kcp.Config)
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallPolicy(ctx, kcp.Client, filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "shard-lease-policy.yaml")); err != nil {
		t.Fatal(err)
	}
	leaseWrite := rbacv1.PolicyRule{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}
	member := rbacv1.PolicyRule{APIGroups: []string{"operator.kyma-project.io"}, Resources: []string{"shards"}, ResourceNames: []string{"module-sync"}, Verbs: []string{"member"}}
	as := func(sa string, rules ...rbacv1.PolicyRule) kubernetes.Interface {
		t.Helper()
		if _, err := admin.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		cfg := rest.CopyConfig(kcp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:" + ns + ":" + sa}
		return kubernetes.NewForConfigOrDie(cfg)
	}
	operator := as("example-operator", leaseWrite)
	moduleSync := as("module-sync", leaseWrite, member)
	lease := func(name, group, holder string) *coordinationv1.Lease {
		return &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{LabelGroup: group},
			Annotations: map[string]string{AnnotationView: holder}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To(holder), LeaseDurationSeconds: ptr.To(int32(2147483647))}}
	}
	refused := func(err error) bool { return apierrors.IsForbidden(err) || apierrors.IsInvalid(err) }

	// The policy takes effect once the API server has loaded it (a dry
	// run passes admission and stores nothing).
	g.Eventually(func() error {
		_, err := operator.CoordinationV1().Leases(ns).Create(ctx, lease("module-sync-shard-zz", "module-sync", "zz"), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(gomega.Satisfy(apierrors.IsForbidden), "the policy in effect")
	if _, err := operator.CoordinationV1().Leases(ns).Create(ctx, lease("module-sync-shard-zz", "module-sync", "zz"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's forged member Lease (holder zz, its own view, 2147483647 s): %v, want Forbidden", err)
	}
	if _, err := operator.CoordinationV1().Leases(ns).Create(ctx, lease("forged", "module-sync", "zz"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's forged member Lease under any name: %v, want Forbidden", err)
	}
	// Its own leader election is untouched.
	own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "example-operator", Namespace: ns}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-1")}}
	if _, err := operator.CoordinationV1().Leases(ns).Create(ctx, own, metav1.CreateOptions{}); err != nil {
		t.Errorf("the operator's own Lease: %v", err)
	}
	// module-sync writes its group's Leases, under the holder's name only.
	if _, err := moduleSync.CoordinationV1().Leases(ns).Create(ctx, lease("module-sync-shard-zz", "module-sync", "yy"), metav1.CreateOptions{}); !refused(err) {
		t.Errorf("module-sync's Lease module-sync-shard-zz held by yy: %v, want refused", err)
	}
	if _, err := moduleSync.CoordinationV1().Leases(ns).Create(ctx, lease("vs-controller-shard-a", "vs-controller", "a"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("module-sync's Lease in group vs-controller: %v, want Forbidden", err)
	}
	// A real member acting as module-sync's ServiceAccount works.
	a, err := New(Options{Leases: moduleSync.CoordinationV1(), Namespace: ns, Group: "module-sync", Identity: "a", Log: logr.Discard()})
	if err != nil {
		t.Fatal(err)
	}
	a.Tick(ctx, testr.New(t))
	if !a.Owns("kcp-system/runtime-1") {
		t.Fatal("a member acting as module-sync's ServiceAccount does not work")
	}
	// The operator can neither take it over, unlabel it nor delete it.
	l, err := operator.CoordinationV1().Leases(ns).Get(ctx, "module-sync-shard-a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	taken := l.DeepCopy()
	taken.Spec.LeaseDurationSeconds = ptr.To(int32(2147483647))
	if _, err := operator.CoordinationV1().Leases(ns).Update(ctx, taken, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's change of a member Lease: %v, want Forbidden", err)
	}
	unlabelled := l.DeepCopy()
	delete(unlabelled.Labels, LabelGroup)
	if _, err := operator.CoordinationV1().Leases(ns).Update(ctx, unlabelled, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's removal of a member Lease's label: %v, want Forbidden", err)
	}
	if err := operator.CoordinationV1().Leases(ns).Delete(ctx, "module-sync-shard-a", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator's delete of a member Lease: %v, want Forbidden", err)
	}
	unlabelledOwn, err := operator.CoordinationV1().Leases(ns).Get(ctx, "example-operator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	unlabelledOwn.Labels = map[string]string{LabelGroup: "module-sync"}
	if _, err := operator.CoordinationV1().Leases(ns).Update(ctx, unlabelledOwn, metav1.UpdateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("the operator labelling its own Lease a member's: %v, want Forbidden", err)
	}
}
