package grants_test

// The fake-cluster tier of the grants (test/fakecluster): Renderer's RBAC
// and workload policy in a runtime in memory, and the checks of Grant.
// module-sync/apply's grant tests run the same against real API servers.

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

var ctx = context.Background()

var widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

func grantOf(module string, spec v1alpha1.ModuleGrantSpec) grants.Grant {
	return grants.From("kcp-system", module, &v1alpha1.ModuleGrant{Spec: spec})
}

func roleBindings(t *testing.T, c client.Client, module string) map[string]rbacv1.RoleBinding {
	t.Helper()
	list := &rbacv1.RoleBindingList{}
	if err := c.List(ctx, list, client.MatchingLabels{grants.LabelModule: module}); err != nil {
		t.Fatal(err)
	}
	out := map[string]rbacv1.RoleBinding{}
	for _, rb := range list.Items {
		out[rb.Namespace] = rb
	}
	return out
}

func clusterRole(t *testing.T, c client.Client, name string) *rbacv1.ClusterRole {
	t.Helper()
	cr := &rbacv1.ClusterRole{}
	if err := c.Get(ctx, client.ObjectKey{Name: name}, cr); err != nil {
		t.Fatalf("ClusterRole %s: %v", name, err)
	}
	return cr
}

func workloadParams(t *testing.T, c client.Client) map[string]string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: grants.WorkloadParamsNamespace, Name: grants.WorkloadParamsName}, cm); err != nil {
		t.Fatal(err)
	}
	return cm.Data
}

// TestFakeRendererEnsure: Ensure writes the workload policy, its entry per
// module, a ClusterRole of the granted namespaced kinds bound in each
// granted namespace that exists (never kube-*), a ClusterRole of the
// granted cluster-scoped kinds and its binding; a kind granted in the
// wrong list gets no rule, a Secret none at all. An unchanged grant sends
// nothing once it rendered completely; a namespace that appears later is
// picked up, one no longer granted loses its RoleBinding.
func TestFakeRendererEnsure(t *testing.T) {
	c := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{widgetGVK: false}),
		fakecluster.WithObjects(namespace("team-a"), namespace("kube-system")))
	spec := v1alpha1.ModuleGrantSpec{
		Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}, {Group: "example.com", Kind: "Widget"}, {Kind: "Secret"}, {Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}},
		ClusterScopedKinds: []v1alpha1.GrantedKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}, {Kind: "ConfigMap"},
			{Group: "example.com", Kind: "Gadget"}},
		Namespaces: []string{"team-a", "team-b", "kube-system"},
		Workloads:  &v1alpha1.WorkloadGrant{Secrets: []string{"db", skr.SecretName, ""}, ServiceAccounts: []string{"runner"}, HostAccess: true, Privileged: true},
	}
	g := grantOf("mod", spec)
	g.ServiceAccounts = []string{"team-a/created", "kube-system/sneaky", "team-a/" + skr.SecretName, "team-a/runner"}
	var r grants.Renderer
	if err := r.Ensure(ctx, c, "rt", g); err != nil {
		t.Fatal(err)
	}

	ns := clusterRole(t, c, grants.User("mod")+":namespaced")
	if len(ns.Rules) != 2 || ns.Rules[0].Resources[0] != "configmaps" || ns.Rules[0].Resources[1] != "configmaps/status" ||
		ns.Rules[1].APIGroups[0] != "example.com" || ns.Rules[1].Resources[0] != "widgets" || len(ns.Rules[0].Verbs) != 7 {
		t.Errorf("namespaced rules %+v: want ConfigMaps and Widgets only (no Secret, no cluster-scoped kind)", ns.Rules)
	}
	if cl := clusterRole(t, c, grants.User("mod")+":cluster"); len(cl.Rules) != 1 || cl.Rules[0].Resources[0] != "clusterroles" {
		t.Errorf("cluster rules %+v: want ClusterRoles only (ConfigMap is namespaced, Gadget not served)", cl.Rules)
	}
	crb := &rbacv1.ClusterRoleBinding{}
	if err := c.Get(ctx, client.ObjectKey{Name: grants.User("mod") + ":cluster"}, crb); err != nil {
		t.Fatal(err)
	}
	if len(crb.Subjects) != 1 || crb.Subjects[0].Name != grants.User("mod") || crb.RoleRef.Name != grants.User("mod")+":cluster" {
		t.Errorf("ClusterRoleBinding %+v", crb)
	}
	rbs := roleBindings(t, c, "mod")
	if len(rbs) != 1 || rbs["team-a"].RoleRef.Name != grants.User("mod")+":namespaced" || rbs["team-a"].Subjects[0].Name != grants.User("mod") {
		t.Errorf("RoleBindings %v: want one in team-a (team-b does not exist, kube-system is never granted)", rbs)
	}
	p, b, err := grants.WorkloadPolicy()
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range []client.Object{p, b} {
		if err := c.Get(ctx, client.ObjectKeyFromObject(o), o); err != nil {
			t.Errorf("workload policy %s: %v", o.GetName(), err)
		}
	}
	want := map[string]string{
		"mod.secrets":         "team-a/db,team-b/db",
		"mod.serviceAccounts": "team-a/created,team-a/runner,team-b/runner",
		"mod.hostAccess":      "true",
		"mod.privileged":      "true",
	}
	if got := workloadParams(t, c); !equal(got, want) {
		t.Errorf("workload parameters %v, want %v", got, want)
	}

	// Unchanged, but team-b and the kind Gadget were missing: the next
	// Ensure looks again.
	if err := c.Create(ctx, namespace("team-b")); err != nil {
		t.Fatal(err)
	}
	if err := r.Ensure(ctx, c, "rt", g); err != nil {
		t.Fatal(err)
	}
	if rbs := roleBindings(t, c, "mod"); len(rbs) != 2 {
		t.Errorf("RoleBindings in %v after team-b appeared, want team-a and team-b", rbs)
	}
	c.Serve(schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}, true)
	if err := r.Ensure(ctx, c, "rt", g); err != nil {
		t.Fatal(err)
	}
	if cl := clusterRole(t, c, grants.User("mod")+":cluster"); len(cl.Rules) != 2 || cl.Rules[1].Resources[0] != "gadgets" {
		t.Errorf("cluster rules %+v after Gadget is served: want ClusterRoles and Gadgets", cl.Rules)
	}
	// Now complete and unchanged: nothing is sent.
	end := c.ExpectNoWrites(t)
	if err := r.Ensure(ctx, c, "rt", g); err != nil {
		t.Fatal(err)
	}
	end()
	// Another module's entry lives beside this one's.
	if err := r.Ensure(ctx, c, "rt", grantOf("other", v1alpha1.ModuleGrantSpec{Namespaces: []string{"team-a"}, Workloads: &v1alpha1.WorkloadGrant{HostAccess: true}})); err != nil {
		t.Fatal(err)
	}
	if got := workloadParams(t, c); got["other.hostAccess"] != "true" || got["mod.hostAccess"] != "true" {
		t.Errorf("two modules' entries: %v", got)
	}

	// team-a no longer granted, nor host access: its RoleBinding and the
	// key go; the other module's entry stays.
	spec.Namespaces = []string{"team-b"}
	spec.Workloads.HostAccess = false
	g2 := grantOf("mod", spec)
	if err := r.Ensure(ctx, c, "rt", g2); err != nil {
		t.Fatal(err)
	}
	if rbs := roleBindings(t, c, "mod"); len(rbs) != 1 || rbs["team-b"].Name == "" {
		t.Errorf("RoleBindings %v, want team-b's only", rbs)
	}
	if got := workloadParams(t, c); got["mod.hostAccess"] != "" || got["other.hostAccess"] != "true" || got["mod.secrets"] != "team-b/db" {
		t.Errorf("after the grant shrank: %v", got)
	}

	// The same client and grant: nothing is written.
	end = c.ExpectNoWrites(t)
	if err := r.Ensure(ctx, c, "rt", g2); err != nil {
		t.Fatal(err)
	}
	end()
	c.Reset()
	// A new client of the runtime (its kubeconfig changed, or it came back
	// to this replica): the same grant is written again.
	if err := r.Ensure(ctx, newClient(c), "rt", g2); err != nil {
		t.Fatal(err)
	}
	if c.Count(fakecluster.Apply, "") == 0 {
		t.Error("with a new client of the runtime, Ensure wrote nothing")
	}
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestFakeRendererFailures: every write or read that fails is Ensure's
// error, naming what failed, and the grant is not remembered.
func TestFakeRendererFailures(t *testing.T) {
	g := grantOf("mod", v1alpha1.ModuleGrantSpec{Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}}, Namespaces: []string{"team-a", "gone"}})
	for _, tc := range []struct {
		verb, kind, name, want string
	}{
		{fakecluster.Apply, "ValidatingAdmissionPolicy", "", "write ValidatingAdmissionPolicy"},
		{fakecluster.Apply, "ConfigMap", "", "write the workload entry of module mod"},
		{fakecluster.Get, "Namespace", "", "namespace gone"},
		{fakecluster.Apply, "ClusterRole", grants.User("mod") + ":cluster", "write *v1.ClusterRole " + grants.User("mod") + ":cluster of module mod"},
		{fakecluster.List, "RoleBinding", "", "list RoleBindings of module mod"},
		{fakecluster.Delete, "RoleBinding", "", "delete RoleBinding gone/"},
	} {
		stale := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: "gone", Name: grants.User("mod"),
			Labels: map[string]string{grants.LabelManagedBy: grants.ManagedBy, grants.LabelModule: "mod"}}}
		c := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(namespace("team-a"), stale))
		c.Fail(tc.verb, tc.kind, tc.name, apierrors.NewForbidden(schema.GroupResource{Resource: tc.kind}, "", errors.New("refused")), 1)
		var r grants.Renderer
		if err := r.Ensure(ctx, c, "rt", g); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s %s refused: %v, want %q", tc.verb, tc.kind, err, tc.want)
		}
		c.Reset()
		if err := r.Ensure(ctx, c, "rt", g); err != nil {
			t.Errorf("%s %s: the retry failed: %v", tc.verb, tc.kind, err)
		}
		if c.Count("", "") == 0 {
			t.Errorf("%s %s: a failed Ensure was remembered (the retry wrote nothing)", tc.verb, tc.kind)
		}
	}
}

// TestFakePolicyActive: the probe's dry-run Pod admitted means the policy
// is not in effect yet; refused by the policy, it is, and that is
// remembered per runtime; a runtime that does not answer is the
// transport's error; other refusals are "not active yet".
func TestFakePolicyActive(t *testing.T) {
	c := fakecluster.New(t, clientgoscheme.Scheme)
	var r grants.Renderer
	if err := r.PolicyActive(ctx, c, "rt"); !errors.Is(err, grants.ErrWorkloadPolicyInactive) || !strings.Contains(err.Error(), "was admitted") {
		t.Errorf("Pod admitted: %v", err)
	}
	if n := c.Count(fakecluster.Create, "Pod"); n != 0 {
		t.Errorf("the probe created %d Pods: it must be a dry run", n)
	}
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods); err != nil || len(pods.Items) != 0 {
		t.Errorf("the probe left Pods: %v, %v", pods.Items, err)
	}

	c.Fail(fakecluster.Create, "Pod", "", fakecluster.ErrUnreachable, 1)
	if err := r.PolicyActive(ctx, c, "rt"); !errors.Is(err, fakecluster.ErrUnreachable) || errors.Is(err, grants.ErrWorkloadPolicyInactive) {
		t.Errorf("unreachable: %v, want the transport's error", err)
	}
	c.Fail(fakecluster.Create, "Pod", "", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p", errors.New("not allowed by RBAC")), 1)
	if err := r.PolicyActive(ctx, c, "rt"); !errors.Is(err, grants.ErrWorkloadPolicyInactive) {
		t.Errorf("another refusal: %v, want not active", err)
	}

	c.Fail(fakecluster.Create, "Pod", "", apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "p",
		errors.New("ValidatingAdmissionPolicy denied: a module's Pod may not use the Secrets of the bundle")), 1)
	if err := r.PolicyActive(ctx, c, "rt"); err != nil {
		t.Errorf("refused by the policy: %v, want active", err)
	}
	c.Fail(fakecluster.Create, "Pod", "", fakecluster.ErrUnreachable, -1)
	if err := r.PolicyActive(ctx, c, "rt"); err != nil {
		t.Errorf("remembered as active: %v", err)
	}
	if err := r.PolicyActive(ctx, c, "rt-2"); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("another runtime is asked: %v", err)
	}
	if err := r.PolicyActive(ctx, newClient(c), "rt"); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("with a new client the runtime is asked again: %v", err)
	}
}

// TestFakeGrantChecks: what a grant allows and refuses, by kind, scope,
// namespace and name, and writers.
func TestFakeGrantChecks(t *testing.T) {
	cm := schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
	cr := schema.GroupVersionKind{Group: "rbac.authorization.k8s.io", Version: "v1", Kind: "ClusterRole"}
	g := grantOf("mod", v1alpha1.ModuleGrantSpec{Managers: []string{"alice"}, Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}},
		ClusterScopedKinds: []v1alpha1.GrantedKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}}, Namespaces: []string{"team-a"}})
	none := grants.From("kcp-system", "mod", nil)
	for _, tc := range []struct {
		name       string
		g          grants.Grant
		gvk        schema.GroupVersionKind
		namespaced bool
		ns, obj    string
		want       string // "" allowed
	}{
		{"granted", g, cm, true, "team-a", "x", ""},
		{"other namespace", g, cm, true, "team-b", "x", `does not grant the namespace "team-b"`},
		{"kind not granted", g, schema.GroupVersionKind{Version: "v1", Kind: "Service"}, true, "team-a", "x", "does not grant the kind Service"},
		{"cluster-scoped granted", g, cr, false, "", "x", ""},
		{"cluster-scoped not granted", g, cm, false, "", "x", "does not grant the cluster-scoped kind ConfigMap"},
		{"secret", g, schema.GroupVersionKind{Version: "v1", Kind: "Secret"}, true, "team-a", "x", "secrets are not synced"},
		{"bundle name", g, cm, true, "team-a", skr.SecretName, "belongs to the watcher's bundle"},
		{"kube namespace", g, cm, true, "kube-system", "x", `namespace "kube-system" is the cluster's own`},
		{"kube namespace itself", g, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, false, "", "kube-public", `namespace "kube-public"`},
		{"no grant", none, cm, true, "team-a", "x", "no ModuleGrant kcp-system/mod"},
	} {
		err := tc.g.Check(tc.gvk, tc.namespaced, tc.ns, tc.obj)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
	for _, tc := range []struct {
		g    grants.Grant
		gk   schema.GroupKind
		want string
	}{
		{g, cm.GroupKind(), ""}, {g, cr.GroupKind(), ""},
		{g, schema.GroupKind{Kind: "Service"}, "does not grant the kind Service"},
		{g, schema.GroupKind{Kind: "Secret"}, "secrets are not synced"},
		{none, cm.GroupKind(), "no ModuleGrant"},
	} {
		err := tc.g.CheckKind(tc.gk)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("CheckKind %s: %v, want %q", tc.gk, err, tc.want)
		}
	}
	if err := g.Writes("alice"); err != nil {
		t.Errorf("alice is named: %v", err)
	}
	if err := g.Writes("bob"); err == nil || !strings.Contains(err.Error(), `written by "bob"`) {
		t.Errorf("bob: %v", err)
	}
	if err := g.Writes(""); err == nil || !strings.Contains(err.Error(), "written by nobody") {
		t.Errorf("no writer: %v", err)
	}
	if err := none.Writes("alice"); err == nil {
		t.Error("no grant names anybody")
	}
	if !strings.HasPrefix(grants.User("mod"), grants.UserPrefix) || !strings.HasPrefix(grants.ProbeUser, grants.UserPrefix) {
		t.Error("users outside the prefix")
	}
}

// newClient is another client of c's runtime (what skrclient builds after
// it dropped the runtime's clients).
func newClient(c *fakecluster.Cluster) client.Client { return &struct{ *fakecluster.Cluster }{c} }
