package kubeconfigs_test

// The fake-cluster tier of the kubeconfig Role (test/fakecluster);
// vs-controller/integration checks module-sync's access with real RBAC.

import (
	"context"
	"errors"
	"strings"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/kubeconfigs"
)

// TestRole: the Role grants get on exactly the kubeconfig Secrets of the
// Kymas in the namespace (by runtime ID, each once), and no rule without
// a Kyma; it follows the Kymas as they come and go.
func TestRole(t *testing.T) {
	ctx := context.Background()
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	fakecluster.AddKyma(s)
	c := fakecluster.New(t, s, fakecluster.WithObjects(fakecluster.Kyma("kcp-system", "b", "runtime-b", ""), fakecluster.Kyma("kcp-system", "a", "", ""),
		fakecluster.Kyma("kcp-system", "a-again", "a", ""), fakecluster.Kyma("elsewhere", "x", "", "")))
	r := &kubeconfigs.Reconciler{Client: c, KymaNamespace: "kcp-system"}
	role := func() *rbacv1.Role {
		t.Helper()
		if _, err := r.Reconcile(ctx, reconcile.Request{}); err != nil {
			t.Fatal(err)
		}
		got := &rbacv1.Role{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kcp-system", Name: kubeconfigs.RoleName}, got); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := role()
	if len(got.Rules) != 1 || strings.Join(got.Rules[0].ResourceNames, ",") != "kubeconfig-a,kubeconfig-runtime-b" ||
		strings.Join(got.Rules[0].Verbs, ",") != "get" || got.Rules[0].Resources[0] != "secrets" {
		t.Errorf("rules %+v", got.Rules)
	}
	for _, k := range []string{"a", "a-again", "b"} {
		if err := c.Delete(ctx, fakecluster.Kyma("kcp-system", k, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if got := role(); len(got.Rules) != 0 {
		t.Errorf("no Kyma: rules %+v", got.Rules)
	}
	c.Fail(fakecluster.Apply, "Role", "", apierrors.NewInternalError(errors.New("etcd")), 1)
	if _, err := r.Reconcile(ctx, reconcile.Request{}); !apierrors.IsInternalError(err) {
		t.Errorf("Role refused: %v", err)
	}
	c.Fail(fakecluster.List, "Kyma", "", fakecluster.ErrUnreachable, 1)
	if _, err := r.Reconcile(ctx, reconcile.Request{}); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("Kymas unreadable: %v", err)
	}
}
