package v1alpha1_test

import (
	"context"
	"fmt"
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
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncresources"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestSyncResourceWrittenBy: with
// manifests/kcp/base/syncresource-writer-policy.yaml on a real API server,
// every SyncResource records who wrote its spec (the annotation module-sync
// checks against the current grant), and nobody records somebody else.
func TestSyncResourceWrittenBy(t *testing.T) {
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
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	const ns = "kcp-system"
	const orphan = "system:serviceaccount:kcp-system:orphan-manager" // named in no grant
	const other = "system:serviceaccount:kcp-system:other-manager"
	as := func(user string) client.Client {
		c := rest.CopyConfig(cfg)
		c.Impersonate = rest.ImpersonationConfig{UserName: user}
		cl, err := client.New(c, client.Options{Scheme: scheme})
		must(err)
		return cl
	}
	must(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "module-managers", Namespace: ns},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"syncresources"},
			Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}))
	must(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "module-managers", Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "module-managers"},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: orphan}, {Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: other}}}))
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "syncresource-writer-policy.yaml"))
	must(err)
	docs := strings.Split(string(b), "\n---\n")
	policy, binding := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	must(yaml.UnmarshalStrict([]byte(docs[0]), policy))
	must(yaml.UnmarshalStrict([]byte(docs[1]), binding))
	must(admin.Create(ctx, policy))
	must(admin.Create(ctx, binding))

	sr := func(name, writer string) *v1alpha1.SyncResource {
		o := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: v1alpha1.SyncResourceSpec{Kyma: "kyma-1", Module: "sample", Items: []v1alpha1.SyncItem{configMapItem("x")}}}
		if writer != "" {
			o.Annotations = map[string]string{v1alpha1.AnnotationWrittenBy: writer}
		}
		return o
	}
	o := as(orphan)
	// The API server takes up a new policy asynchronously.
	must(wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := o.Create(ctx, sr("probe", orphan))
		if err == nil {
			return false, admin.Delete(ctx, sr("probe", ""))
		}
		return apierrors.IsForbidden(err), nil
	}))
	refused := func(what string, err error, want string) {
		t.Helper()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want Forbidden saying %q", what, err, want)
		}
	}
	// Issue 33: a manager no grant names held the standard module-manager
	// RBAC (above) and created SyncResources; now the KCP refuses it.
	notManager := func(user string) string {
		return "user " + user + " may not write SyncResources of module sample: no ModuleGrant kcp-system/sample names it"
	}
	refused("a SyncResource of a writer no grant names", o.Create(ctx, sr("ungranted", orphan)), notManager(orphan))

	// The grant names both: module-sync gives them the verb the policy
	// asks the authorizer for (grants.KeepManagerRBAC, run here as module-sync
	// runs it).
	grant := &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: "sample", Namespace: ns},
		Spec: v1alpha1.ModuleGrantSpec{Managers: []string{orphan, other}}}
	must(admin.Create(ctx, grant))
	must(grants.KeepManagerRBAC(ctx, admin, grant))
	// RBAC reaches the authorizer through its informers, a moment later.
	must(wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		err := o.Create(ctx, sr("probe", orphan))
		if err == nil {
			return true, admin.Delete(ctx, sr("probe", ""))
		}
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return false, err
	}))
	refused("a SyncResource that records no writer", o.Create(ctx, sr("none", "")), "set the annotation operator.kyma-project.io/written-by to "+orphan)
	refused("a SyncResource that records somebody else", o.Create(ctx, sr("forged", other)), "to "+orphan)

	mine := sr("mine", orphan)
	must(o.Create(ctx, mine))
	// Another writer changes the spec: it must record itself.
	edit := &v1alpha1.SyncResource{}
	must(as(other).Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Spec.Items = append(edit.Spec.Items, configMapItem("more"))
	refused("a spec change that keeps the old writer", as(other).Update(ctx, edit), "to "+other)
	edit.Annotations[v1alpha1.AnnotationWrittenBy] = other
	must(as(other).Update(ctx, edit))
	// Nobody rewrites the record without writing the spec.
	must(admin.Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Annotations[v1alpha1.AnnotationWrittenBy] = orphan
	refused("the record changed without a spec change", o.Update(ctx, edit), "changes only with the spec")
	// Metadata writes that keep the record (module-sync's finalizer, the
	// garbage collector) pass.
	must(admin.Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Finalizers = append(edit.Finalizers, "operator.kyma-project.io/module-sync")
	must(admin.Update(ctx, edit))
	edit.Finalizers = nil
	must(admin.Update(ctx, edit))

	// The grant stops naming other: it may change no spec any more, while
	// metadata writes of others still pass.
	must(admin.Get(ctx, client.ObjectKeyFromObject(grant), grant))
	grant.Spec.Managers = []string{orphan}
	must(admin.Update(ctx, grant))
	must(grants.KeepManagerRBAC(ctx, admin, grant))
	var last error
	if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := as(other).Get(ctx, client.ObjectKeyFromObject(mine), edit); err != nil {
			return false, err
		}
		edit.Spec.Items = append(edit.Spec.Items, configMapItem(fmt.Sprintf("again-%d", len(edit.Spec.Items))))
		last = as(other).Update(ctx, edit)
		return last != nil, nil
	}); err != nil {
		t.Fatalf("a writer the grant no longer names still changed the spec: %v", err)
	}
	refused("a spec change by a writer the grant no longer names", last, notManager(other))
	must(admin.Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Labels = map[string]string{"team": "x"}
	must(as(other).Update(ctx, edit))

	// Issue 40: deletes are bound like writes. A writer the grant no
	// longer names (other) may neither delete the SyncResource nor change
	// its finalizers; the grant's manager (orphan), module-sync as its
	// production Role lets it, and the garbage collector may.
	must(admin.Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Finalizers = []string{syncresources.Finalizer}
	must(admin.Update(ctx, edit))
	notRemover := func(what string) string {
		return "user " + other + " may not " + what + " of module sample: no ModuleGrant kcp-system/sample names it"
	}
	refused("a delete by a writer no grant names", as(other).Delete(ctx, edit.DeepCopy()), notRemover("delete SyncResources"))
	stripped := edit.DeepCopy()
	stripped.Finalizers = nil
	refused("a finalizer stripped by a writer no grant names", as(other).Update(ctx, stripped), notRemover("change the finalizers of SyncResources"))
	refused("a finalizer stripped by a merge patch of a writer no grant names",
		as(other).Patch(ctx, stripped, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))),
		notRemover("change the finalizers of SyncResources"))
	added := edit.DeepCopy()
	added.Finalizers = append(added.Finalizers, "example.com/block")
	refused("a finalizer added by a writer no grant names", as(other).Update(ctx, added), notRemover("change the finalizers of SyncResources"))

	// module-sync with the Role the manifests give it (the verb on every
	// grant of its namespace) takes its finalizer off and puts it back.
	moduleSync := "system:serviceaccount:" + ns + ":module-sync"
	role := &rbacv1.Role{}
	b, err = os.ReadFile(filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "rbac-module-sync", "role.yaml"))
	must(err)
	must(yaml.UnmarshalStrict(b, role))
	must(admin.Create(ctx, role))
	must(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "module-sync", Namespace: ns}}}))
	must(wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := as(moduleSync).Get(ctx, client.ObjectKeyFromObject(mine), edit); err != nil {
			return false, nil // RBAC not taken up yet
		}
		edit.Finalizers = nil
		err := as(moduleSync).Update(ctx, edit)
		if apierrors.IsForbidden(err) {
			return false, nil
		}
		return err == nil, err
	}))
	must(as(moduleSync).Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Finalizers = []string{syncresources.Finalizer}
	must(as(moduleSync).Update(ctx, edit))

	// The grant's own manager strips the finalizer and deletes.
	must(o.Get(ctx, client.ObjectKeyFromObject(mine), edit))
	edit.Finalizers = nil
	must(o.Update(ctx, edit))
	must(o.Delete(ctx, edit))

	// The garbage collector deletes a SyncResource whose owner went, and
	// the namespace controller those of a deleted namespace: the control
	// plane is not asked for a grant.
	for i, u := range []string{"system:serviceaccount:kube-system:generic-garbage-collector", "system:serviceaccount:kube-system:namespace-controller"} {
		gone := sr(fmt.Sprintf("owned-%d", i), orphan)
		must(o.Create(ctx, gone))
		refused("a delete by a writer no grant names", as(other).Delete(ctx, gone.DeepCopy()), notRemover("delete SyncResources"))
		if err := as(u).Delete(ctx, gone); err != nil {
			t.Errorf("delete by %s (its bootstrap RBAC allows it): %v", u, err)
		}
	}
}
