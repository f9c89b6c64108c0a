package syncitems_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// asModule is a client of the SKR acting as module's user, as module-sync
// writes a module's objects.
func asModule(t *testing.T, module string) client.Client {
	t.Helper()
	kubeconfig, err := skrEnv.Kubeconfig("")
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: skrclient.SecretName("skr")},
		Data: map[string][]byte{skrclient.SecretKey: kubeconfig}}
	runtimes := &skrclient.Runtimes{Reader: fake.NewClientBuilder().WithObjects(secret).Build(), Namespace: "kcp-system", Clients: clients}
	mc, err := runtimes.ForUser(bgCtx, "skr", grants.User(module))
	if err != nil {
		t.Fatal(err)
	}
	return mc
}

func clusterAdminBinding(name string) v1alpha1.SyncItem {
	return item(name, v1alpha1.CreateAndSync, raw(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":%q},`+
		`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
		`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"attacker"}]}`, name))
}

// TestGrantEnforced: a module writes only what its grant names, checked
// before the call and refused by the SKR API server itself (the module's
// user has only the RBAC rendered from the grant).
func TestGrantEnforced(t *testing.T) {
	testenv.SkipIfShort(t)
	mine, other := namespace(t), namespace(t)
	for _, ns := range []string{"kube-system", other} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "coredns", Namespace: ns}}
		if err := skr.Create(bgCtx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	mg := &v1alpha1.ModuleGrant{Spec: v1alpha1.ModuleGrantSpec{
		Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}}, Namespaces: []string{mine},
	}}
	g := grants.From("kcp-system", "granted", mg)
	var r grants.Renderer
	if err := r.Ensure(bgCtx, skr, "skr", g); err != nil {
		t.Fatal(err)
	}
	mod := asModule(t, "granted")

	t.Run("items outside the grant are Refused, naming the grant, and nothing is written", func(t *testing.T) {
		sr := syncResource("grant",
			item("ok", v1alpha1.CreateAndSync, configMap(mine, "ok", "1")),
			item("elsewhere", v1alpha1.CreateAndSync, configMap(other, "elsewhere", "1")),
			clusterAdminBinding("escalate"),
			item("kill-dns", v1alpha1.Delete, configMap("kube-system", "coredns", "")),
			item("kill-other", v1alpha1.Delete, configMap(other, "coredns", "")),
			item("bundle", v1alpha1.CreateAndSync, configMap(mine, "skr-webhook", "1")),
		)
		res := syncitems.Apply(bgCtx, mod, g, sr)
		want := map[string]string{
			"elsewhere":  `ModuleGrant kcp-system/granted does not grant the namespace "` + other + `"`,
			"escalate":   "ModuleGrant kcp-system/granted does not grant the kind ClusterRoleBinding.rbac.authorization.k8s.io",
			"kill-dns":   `namespace "kube-system" is the cluster's own`,
			"kill-other": `ModuleGrant kcp-system/granted does not grant the namespace "` + other + `"`,
			"bundle":     "watcher's bundle",
		}
		for name, msg := range want {
			if st := itemStatus(t, res, name); st.State != v1alpha1.ItemRefused || !strings.Contains(st.Message, msg) || st.Object != nil {
				t.Errorf("item %s: %+v, want Refused %q", name, st, msg)
			}
		}
		if st := itemStatus(t, res, "ok"); st.State != v1alpha1.ItemReady {
			t.Errorf("granted item: %+v", st)
		}
		if res.Retry {
			t.Error("refused items are not retried")
		}
		if err := skr.Get(bgCtx, client.ObjectKey{Name: "escalate"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRoleBinding in the SKR: %v", err)
		}
		getConfigMap(t, "kube-system", "coredns")
		getConfigMap(t, other, "coredns")
	})

	t.Run("the SKR API server refuses what the grant does not give, even past the check", func(t *testing.T) {
		// A check that lets everything through (as a bug would): the
		// module's RBAC in the SKR still holds.
		wide := grants.From("kcp-system", "granted", &v1alpha1.ModuleGrant{Spec: v1alpha1.ModuleGrantSpec{
			Kinds:              []v1alpha1.GrantedKind{{Kind: "ConfigMap"}},
			Namespaces:         []string{mine, other},
			ClusterScopedKinds: []v1alpha1.GrantedKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}},
		}})
		sr := syncResource("past-check",
			item("elsewhere", v1alpha1.CreateAndSync, configMap(other, "elsewhere", "1")),
			clusterAdminBinding("escalate"),
		)
		res := syncitems.Apply(bgCtx, mod, wide, sr)
		for _, name := range []string{"elsewhere", "escalate"} {
			st := itemStatus(t, res, name)
			if st.State != v1alpha1.ItemError || !strings.Contains(st.Message, "forbidden") || !strings.Contains(st.Message, grants.User("granted")) {
				t.Errorf("item %s: %+v, want the SKR's Forbidden for the module's user", name, st)
			}
		}
		if err := skr.Get(bgCtx, client.ObjectKey{Name: "escalate"}, &rbacv1.ClusterRoleBinding{}); !apierrors.IsNotFound(err) {
			t.Errorf("ClusterRoleBinding in the SKR: %v", err)
		}
		if !absent(t, other, "elsewhere") {
			t.Error("a ConfigMap outside the granted namespaces reached the SKR")
		}
	})

	t.Run("a narrowed grant takes the module's rights away in the SKR", func(t *testing.T) {
		narrowed := grants.From("kcp-system", "granted", &v1alpha1.ModuleGrant{})
		counted := &requests{Client: skr}
		if err := r.Ensure(bgCtx, counted, "skr", narrowed); err != nil {
			t.Fatal(err)
		}
		err := mod.Get(bgCtx, client.ObjectKey{Namespace: mine, Name: "ok"}, &corev1.ConfigMap{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("read after the grant was narrowed: %v, want Forbidden", err)
		}
		// A pass with the same grant and client sends nothing: it is
		// remembered.
		counted.n.Store(0)
		if err := r.Ensure(bgCtx, counted, "skr", narrowed); err != nil || counted.n.Load() != 0 {
			t.Errorf("an unchanged grant rendered again: %d requests, %v", counted.n.Load(), err)
		}
	})
}

// requests counts the requests sent through a client (those Renderer
// sends).
type requests struct {
	client.Client
	n atomic.Int64
}

func (c *requests) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.n.Add(1)
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *requests) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.n.Add(1)
	return c.Client.List(ctx, list, opts...)
}

func (c *requests) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.n.Add(1)
	return c.Client.Create(ctx, obj, opts...)
}

func (c *requests) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.n.Add(1)
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *requests) Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	c.n.Add(1)
	return c.Client.Apply(ctx, obj, opts...)
}

// TestOnlyWhatItCreated: Delete, prune and CreateAndSync touch an object
// that module-sync did not create for this SyncResource only with adopt.
func TestOnlyWhatItCreated(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	for _, name := range []string{"theirs", "adoptable"} {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Data: map[string]string{"key": "theirs"}}
		if err := skr.Create(bgCtx, cm); err != nil {
			t.Fatal(err)
		}
	}
	adopt := item("adopt", v1alpha1.CreateAndSync, configMap(ns, "adoptable", "ours"))
	adopt.Adopt = true
	sr := syncResource("mark",
		item("delete-theirs", v1alpha1.Delete, configMap(ns, "theirs", "")),
		item("sync-theirs", v1alpha1.CreateAndSync, configMap(ns, "theirs", "ours")),
		adopt,
	)
	res := pass(t, sr)
	for _, name := range []string{"delete-theirs", "sync-theirs"} {
		if st := itemStatus(t, res, name); st.State != v1alpha1.ItemRefused || !strings.Contains(st.Message, "not created by this SyncResource") || st.Object != nil {
			t.Errorf("item %s: %+v", name, st)
		}
	}
	if got := getConfigMap(t, ns, "theirs"); got.Data["key"] != "theirs" || got.Annotations[syncitems.OwnerAnnotation] != "" {
		t.Errorf("an object module-sync did not create was changed: %+v", got)
	}
	if st := itemStatus(t, res, "adopt"); st.State != v1alpha1.ItemReady || st.Object == nil {
		t.Errorf("adopt: %+v", st)
	}
	if got := getConfigMap(t, ns, "adoptable"); got.Data["key"] != "ours" || got.Annotations[syncitems.OwnerAnnotation] != "kcp-system/mark" {
		t.Errorf("adopted object: %+v", got.ObjectMeta)
	}

	// Another SyncResource's object is not this one's either.
	other := syncResource("other-mark", item("steal", v1alpha1.CreateAndSync, configMap(ns, "adoptable", "stolen")),
		item("delete", v1alpha1.Delete, configMap(ns, "adoptable", "")))
	res = pass(t, other)
	for _, name := range []string{"steal", "delete"} {
		if st := itemStatus(t, res, name); st.State != v1alpha1.ItemRefused {
			t.Errorf("item %s on another SyncResource's object: %+v", name, st)
		}
	}

	// Removing the adopting item deletes the adopted object (adoption
	// means: module-sync's from now on).
	sr.Spec.Items = sr.Spec.Items[:2]
	pass(t, sr)
	if !absent(t, ns, "adoptable") {
		t.Error("the adopted object was not pruned with its item")
	}
	getConfigMap(t, ns, "theirs")
}
