package v1alpha1_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestSyncResourceWriters: with manifests/kcp/base/syncresource-policy.yaml
// on a real API server, a module manager writes only SyncResources of its
// own module, and nobody retargets spec.kyma or spec.module (CEL).
func TestSyncResourceWriters(t *testing.T) {
	testenv.SkipIfShort(t)
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	cfg := env.Cluster("kcp").Config
	admin, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "kcp-system"
	manager := func(module string) string { return "system:serviceaccount:" + ns + ":" + module + "-manager" }
	as := func(user string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: scheme})
		if err != nil {
			t.Fatal(err)
		}
		return cl
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	must(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	// RBAC as a module manager gets it (module-sync/example's markers):
	// SyncResources of any module; the policy narrows it.
	must(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "module-managers", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"syncresources"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}))
	binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "module-managers", Namespace: ns},
		RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "module-managers"}}
	for _, m := range []string{"a", "b"} {
		binding.Subjects = append(binding.Subjects, rbacv1.Subject{Kind: "ServiceAccount", Name: m + "-manager", Namespace: ns})
		must(admin.Create(ctx, &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: m, Namespace: ns},
			Spec: v1alpha1.ModuleGrantSpec{Managers: []string{manager(m)}}}))
	}
	must(admin.Create(ctx, binding))
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "syncresource-policy.yaml"))
	must(err)
	docs := strings.Split(string(b), "\n---\n")
	policy, policyBinding := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	must(yaml.UnmarshalStrict([]byte(docs[0]), policy))
	must(yaml.UnmarshalStrict([]byte(docs[1]), policyBinding))
	must(admin.Create(ctx, policy))
	must(admin.Create(ctx, policyBinding))

	a, bm := as(manager("a")), as(manager("b"))
	sr := func(name, module string) *v1alpha1.SyncResource {
		return &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.SyncResourceSpec{Kyma: "kyma-1", Module: module, Items: []v1alpha1.SyncItem{configMapItem("x")}}}
	}
	// The API server takes up a new policy asynchronously: wait until it
	// refuses a first write of another module's SyncResource.
	must(wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := a.Create(ctx, sr("probe", "b"))
		if err == nil {
			return false, admin.Delete(ctx, sr("probe", "b"))
		}
		return apierrors.IsForbidden(err) || apierrors.IsInvalid(err), nil
	}))

	mineA, mineB := sr("of-a", "a"), sr("of-b", "b")
	must(a.Create(ctx, mineA))
	must(bm.Create(ctx, mineB))

	refused := func(name string, err error, want string) {
		t.Helper()
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want it to say %q", name, err, want)
		}
	}
	refused("A creates B's SyncResource", a.Create(ctx, sr("a-as-b", "b")), "manages module a")
	refused("A creates a SyncResource of no module", a.Create(ctx, sr("a-no-module", "")), "may write only SyncResources with spec.module a")

	edit := &v1alpha1.SyncResource{}
	must(a.Get(ctx, client.ObjectKeyFromObject(mineB), edit))
	edit.Spec.Items = append(edit.Spec.Items, configMapItem("injected"))
	refused("A edits B's SyncResource", a.Update(ctx, edit), "manages module a")
	refused("A deletes B's SyncResource", a.Delete(ctx, mineB), "may not change or delete a SyncResource of another module")

	// B takes its own SyncResource to module a: refused by the CRD (and the policy).
	must(bm.Get(ctx, client.ObjectKeyFromObject(mineB), edit))
	edit.Spec.Module = "a"
	refused("B moves its SyncResource to module a", bm.Update(ctx, edit), "spec.module is immutable")

	must(a.Get(ctx, client.ObjectKeyFromObject(mineA), edit))
	edit.Spec.Kyma = "kyma-2"
	refused("A retargets spec.kyma", a.Update(ctx, edit), "spec.kyma is immutable")
	must(admin.Get(ctx, client.ObjectKeyFromObject(mineA), edit))
	edit.Spec.Kyma = "kyma-2"
	refused("the platform retargets spec.kyma", admin.Update(ctx, edit), "spec.kyma is immutable")

	// What a manager may do: change and delete its own.
	must(a.Get(ctx, client.ObjectKeyFromObject(mineA), edit))
	edit.Spec.Items = append(edit.Spec.Items, configMapItem("more"))
	must(a.Update(ctx, edit))
	must(a.Delete(ctx, edit))
	if err := bm.Get(ctx, client.ObjectKeyFromObject(mineB), edit); err != nil {
		t.Errorf("B's SyncResource after A's attempts: %v", err)
	}
}
