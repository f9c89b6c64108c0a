package syncitems_test

// The fake-cluster tier of the items engine (test/fakecluster): a runtime
// in memory, so these run under -short; syncitems_test.go, grant_test.go and
// workload_test.go run the engine against a real API server (RBAC,
// impersonation, the workload policy's admission).

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

var (
	widgetGVK = schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	// fakeGrant: ConfigMaps, ServiceAccounts and Widgets in "default",
	// ClusterRoles.
	fakeGrant = grants.Grant{Name: "ModuleGrant kcp-system/test", Module: "test", Found: true, Spec: v1alpha1.ModuleGrantSpec{
		Kinds:              []v1alpha1.GrantedKind{{Kind: "ConfigMap"}, {Kind: "ServiceAccount"}, {Group: "example.com", Kind: "Widget"}, {Kind: "Secret"}},
		ClusterScopedKinds: []v1alpha1.GrantedKind{{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}},
		Namespaces:         []string{"default"},
	}}
)

func fakeSKR(t *testing.T, objs ...client.Object) *fakecluster.Cluster {
	t.Helper()
	widget := &unstructured.Unstructured{}
	widget.SetGroupVersionKind(widgetGVK)
	return fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{widgetGVK: false}),
		fakecluster.WithStatus(widget), fakecluster.WithObjects(objs...))
}

// fakePass runs Apply and stores the items in status, as the reconciler
// does.
func fakePass(c client.Client, sr *v1alpha1.SyncResource) syncitems.Result {
	res := syncitems.Apply(bgCtx, c, fakeGrant, sr)
	sr.Status.Items = res.Items
	return res
}

func cmIn(t *testing.T, c client.Client, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(bgCtx, client.ObjectKey{Namespace: "default", Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return cm
}

func owned(name, owner string) *corev1.ConfigMap {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}, Data: map[string]string{"key": "theirs"}}
	if owner != "" {
		cm.Annotations = map[string]string{syncitems.OwnerAnnotation: owner}
	}
	return cm
}

// TestFakeStrategies: CreateAndSync applies on every pass (drift and spec
// changes), CreateAndIgnore creates once and leaves the object alone,
// Delete removes what this SyncResource created and refuses anything
// else; an object someone else created is taken over only with adopt, and
// a ServiceAccount never.
func TestFakeStrategies(t *testing.T) {
	c := fakeSKR(t, owned("doomed", "kcp-system/s"), owned("foreign", ""), owned("adoptable", ""),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "runner"}})
	adopt := item("adopt", v1alpha1.CreateAndSync, configMap("default", "adoptable", "ours"))
	adopt.Adopt = true
	saAdopt := item("sa", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"runner","namespace":"default"}}`))
	saAdopt.Adopt = true
	sr := syncResource("s",
		item("synced", v1alpha1.CreateAndSync, configMap("default", "synced", "v1")),
		item("ignored", v1alpha1.CreateAndIgnore, configMap("default", "ignored", "v1")),
		item("doomed", v1alpha1.Delete, configMap("default", "doomed", "")),
		item("gone", v1alpha1.Delete, configMap("default", "never-was", "")),
		item("not-mine", v1alpha1.Delete, configMap("default", "foreign", "")),
		item("taken", v1alpha1.CreateAndSync, configMap("default", "foreign", "ours")),
		adopt, saAdopt,
		item("left", v1alpha1.CreateAndIgnore, configMap("default", "foreign", "ours")),
	)
	res := fakePass(c, sr)
	for name, want := range map[string]struct {
		state v1alpha1.ItemState
		msg   string
		obj   bool
	}{
		"synced":   {v1alpha1.ItemReady, "applied", true},
		"ignored":  {v1alpha1.ItemReady, "created", true},
		"doomed":   {v1alpha1.ItemReady, "absent", false},
		"gone":     {v1alpha1.ItemReady, "absent", false},
		"not-mine": {v1alpha1.ItemRefused, "module-sync deletes only what it created", false},
		"taken":    {v1alpha1.ItemRefused, "set adopt: true", false},
		"adopt":    {v1alpha1.ItemReady, "applied", true},
		"sa":       {v1alpha1.ItemRefused, "a ServiceAccount is never adopted", false},
		"left":     {v1alpha1.ItemReady, "exists and was not created by module-sync; left alone", false},
	} {
		st := itemStatus(t, res, name)
		if st.State != want.state || !strings.Contains(st.Message, want.msg) || (st.Object != nil) != want.obj {
			t.Errorf("item %s: %+v, want %s %q (object %t)", name, st, want.state, want.msg, want.obj)
		}
	}
	if res.Retry {
		t.Error("refusals are retried")
	}
	if st, cond := res.Summary(); st != v1alpha1.StateWarning || cond.Reason != "ItemsRefused" || !strings.Contains(cond.Message, "not-mine, taken, sa") {
		t.Errorf("summary %s %+v", st, cond)
	}
	if cm := cmIn(t, c, "synced"); cm.Data["key"] != "v1" || cm.Labels["app"] != "demo" || cm.Annotations[syncitems.OwnerAnnotation] != "kcp-system/s" {
		t.Errorf("synced %+v", cm.ObjectMeta)
	}
	if cmIn(t, c, "doomed") != nil || cmIn(t, c, "foreign").Data["key"] != "theirs" {
		t.Error("Delete: want doomed gone and foreign kept")
	}
	if cm := cmIn(t, c, "adoptable"); cm.Data["key"] != "ours" || cm.Annotations[syncitems.OwnerAnnotation] != "kcp-system/s" {
		t.Errorf("adopted %+v", cm)
	}

	// Drift and spec changes: CreateAndSync follows, CreateAndIgnore not.
	for _, name := range []string{"synced", "ignored"} {
		cm := cmIn(t, c, name)
		cm.Data["key"] = "edited in the SKR"
		if err := c.Update(bgCtx, cm); err != nil {
			t.Fatal(err)
		}
	}
	sr.Spec.Items[1].Resource = configMap("default", "ignored", "v2")
	res = fakePass(c, sr)
	if got := cmIn(t, c, "synced").Data["key"]; got != "v1" {
		t.Errorf("CreateAndSync drift not corrected: %q", got)
	}
	if got := cmIn(t, c, "ignored").Data["key"]; got != "edited in the SKR" {
		t.Errorf("CreateAndIgnore changed: %q", got)
	}
	if st := itemStatus(t, res, "ignored"); st.Message != "created earlier; left alone" || st.Object == nil {
		t.Errorf("ignored on the second pass: %+v", st)
	}
	// An object that lost our annotation is still ours when the inventory
	// names it.
	cm := cmIn(t, c, "ignored")
	cm.Annotations = nil
	if err := c.Update(bgCtx, cm); err != nil {
		t.Fatal(err)
	}
	if st := itemStatus(t, fakePass(c, sr), "ignored"); st.Object == nil {
		t.Errorf("ignored, known from the inventory: %+v", st)
	}
	if err := c.Delete(bgCtx, cmIn(t, c, "ignored")); err != nil {
		t.Fatal(err)
	}
	fakePass(c, sr)
	if got := cmIn(t, c, "ignored").Data["key"]; got != "v2" {
		t.Errorf("CreateAndIgnore not created again from the spec: %q", got)
	}
}

// TestFakeBadItems: one bad item never stops the others; each gets its
// state (invalid and refused items wait for a change, a kind the runtime
// does not serve yet and API errors are retried).
func TestFakeBadItems(t *testing.T) {
	c := fakeSKR(t)
	sr := syncResource("bad",
		item("good", v1alpha1.CreateAndSync, configMap("default", "good", "v")),
		item("not-json", v1alpha1.CreateAndSync, raw(`{`)),
		item("empty", v1alpha1.CreateAndSync, k8sruntime.RawExtension{}),
		item("no-kind", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","metadata":{"name":"x"}}`)),
		item("bad-version", v1alpha1.CreateAndSync, raw(`{"apiVersion":"a/b/c","kind":"ConfigMap","metadata":{"name":"x"}}`)),
		item("no-name", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"default"}}`)),
		item("bad-metadata", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":"x"}`)),
		item("no-namespace", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)),
		item("namespaced-cluster-kind", v1alpha1.CreateAndSync, raw(`{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRole","metadata":{"name":"x","namespace":"default"}}`)),
		item("secret", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x","namespace":"default"}}`)),
		item("not-granted", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"Service","metadata":{"name":"x","namespace":"default"}}`)),
		item("other-namespace", v1alpha1.CreateAndSync, configMap("elsewhere", "x", "v")),
		item("unknown-kind", v1alpha1.CreateAndSync, raw(`{"apiVersion":"example.com/v1","kind":"Gizmo","metadata":{"name":"x","namespace":"default"}}`)),
		item("strategy", "Sometimes", configMap("default", "x", "v")),
		v1alpha1.SyncItem{Name: "typed", Strategy: v1alpha1.CreateAndSync, Resource: k8sruntime.RawExtension{Object: &corev1.ConfigMap{
			TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"}, ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "typed"}}}},
	)
	gizmo := fakeGrant
	gizmo.Spec.Kinds = append(append([]v1alpha1.GrantedKind{}, fakeGrant.Spec.Kinds...), v1alpha1.GrantedKind{Group: "example.com", Kind: "Gizmo"})
	res := syncitems.Apply(bgCtx, c, gizmo, sr)
	for name, want := range map[string]struct {
		state v1alpha1.ItemState
		msg   string
	}{
		"good":                    {v1alpha1.ItemReady, "applied"},
		"typed":                   {v1alpha1.ItemReady, "applied"},
		"not-json":                {v1alpha1.ItemError, "invalid object"},
		"empty":                   {v1alpha1.ItemError, "invalid object: empty"},
		"no-kind":                 {v1alpha1.ItemError, "apiVersion and kind must be set"},
		"bad-version":             {v1alpha1.ItemError, "invalid object"},
		"no-name":                 {v1alpha1.ItemError, "metadata.name must be set"},
		"bad-metadata":            {v1alpha1.ItemError, "metadata is not an object"},
		"no-namespace":            {v1alpha1.ItemError, "ConfigMap is namespaced"},
		"namespaced-cluster-kind": {v1alpha1.ItemError, "ClusterRole is cluster-scoped"},
		"secret":                  {v1alpha1.ItemRefused, "secrets are not synced"},
		"not-granted":             {v1alpha1.ItemRefused, "does not grant the kind Service"},
		"other-namespace":         {v1alpha1.ItemRefused, `does not grant the namespace "elsewhere"`},
		"unknown-kind":            {v1alpha1.ItemError, "no such kind in the runtime"},
		"strategy":                {v1alpha1.ItemError, `unknown strategy "Sometimes"`},
	} {
		if st := itemStatus(t, res, name); st.State != want.state || !strings.Contains(st.Message, want.msg) {
			t.Errorf("item %s: %+v, want %s %q", name, st, want.state, want.msg)
		}
	}
	if !res.Retry {
		t.Error("a kind the runtime does not serve yet is not retried")
	}
	if st, cond := res.Summary(); st != v1alpha1.StateError || cond.Reason != "ItemsFailed" || !strings.Contains(cond.Message, "; refused: secret, not-granted, other-namespace") {
		t.Errorf("summary %s %+v", st, cond)
	}
	if cmIn(t, c, "good") == nil || cmIn(t, c, "typed") == nil {
		t.Error("the good items were not applied")
	}

	// Only permanent failures: no retry.
	res = syncitems.Apply(bgCtx, c, fakeGrant, syncResource("bad", item("no-name", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{}}`))))
	if res.Retry {
		t.Error("an invalid object is retried")
	}
}

// TestFakeAPIErrors: an API server's refusal is the item's error, retried
// unless the object is invalid; the workload policy's refusal is Refused
// and retried; a transport error ends the pass (unreachable runtime).
func TestFakeAPIErrors(t *testing.T) {
	c := fakeSKR(t)
	sr := syncResource("api", item("a", v1alpha1.CreateAndSync, configMap("default", "a", "v")))
	c.Fail(fakecluster.Apply, "ConfigMap", "a", apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "a", field.ErrorList{field.Invalid(field.NewPath("data"), "x", "bad")}), 1)
	if res := fakePass(c, sr); res.Retry || !strings.HasPrefix(itemStatus(t, res, "a").Message, "apply: ConfigMap") {
		t.Errorf("invalid: retry %t, %+v", res.Retry, res.Items)
	}
	c.Fail(fakecluster.Apply, "ConfigMap", "a", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, sr); !res.Retry || itemStatus(t, res, "a").State != v1alpha1.ItemError {
		t.Errorf("internal error: retry %t, %+v", res.Retry, res.Items)
	}
	c.Fail(fakecluster.Apply, "ConfigMap", "a", apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "a",
		errors.New("ValidatingAdmissionPolicy '"+grants.WorkloadPolicyName+"' with binding denied request")), 1)
	if res := fakePass(c, sr); !res.Retry || itemStatus(t, res, "a").State != v1alpha1.ItemRefused ||
		!strings.Contains(itemStatus(t, res, "a").Message, "refused by the runtime's admission") {
		t.Errorf("workload policy: retry %t, %+v", res.Retry, res.Items)
	}
	c.Fail(fakecluster.Get, "ConfigMap", "a", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, sr); !strings.HasPrefix(itemStatus(t, res, "a").Message, "get: ") {
		t.Errorf("get failed: %+v", res.Items)
	}
	del := syncResource("api", item("d", v1alpha1.Delete, configMap("default", "d", "")))
	if err := c.Create(bgCtx, owned("d", "kcp-system/api")); err != nil {
		t.Fatal(err)
	}
	c.Fail(fakecluster.Delete, "ConfigMap", "d", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, del); !strings.HasPrefix(itemStatus(t, res, "d").Message, "delete: ") || !res.Retry {
		t.Errorf("delete failed: %+v", res.Items)
	}
	c.Fail(fakecluster.Delete, "ConfigMap", "d", fakecluster.Conflict("configmaps", "d"), 1)
	if res := fakePass(c, del); itemStatus(t, res, "d").State != v1alpha1.ItemReady {
		t.Errorf("delete conflict (replaced since the read): %+v", res.Items)
	}
	c.Fail(fakecluster.Get, "ConfigMap", "", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, del); !strings.HasPrefix(itemStatus(t, res, "d").Message, "get: ") {
		t.Errorf("get before delete failed: %+v", res.Items)
	}
	ign := syncResource("api", item("i", v1alpha1.CreateAndIgnore, configMap("default", "i", "v")))
	c.Fail(fakecluster.Create, "ConfigMap", "i", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, ign); !strings.HasPrefix(itemStatus(t, res, "i").Message, "create: ") {
		t.Errorf("create failed: %+v", res.Items)
	}
	c.Fail(fakecluster.Get, "ConfigMap", "i", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := fakePass(c, ign); !strings.HasPrefix(itemStatus(t, res, "i").Message, "get: ") {
		t.Errorf("get before create failed: %+v", res.Items)
	}
}

// TestFakePrune: objects of items that left the spec are deleted (kept in
// the inventory while that fails); an item whose object changed has its
// old object deleted; an object another item now applies, or one the grant
// no longer allows, stays.
func TestFakePrune(t *testing.T) {
	c := fakeSKR(t)
	sr := syncResource("p",
		item("a", v1alpha1.CreateAndSync, configMap("default", "a", "v")),
		item("b", v1alpha1.CreateAndSync, configMap("default", "b", "v")),
		item("c", v1alpha1.CreateAndSync, configMap("default", "c", "v")),
		item("d", v1alpha1.CreateAndSync, configMap("default", "d", "v")),
		item("e", v1alpha1.CreateAndSync, configMap("default", "e", "v")),
	)
	fakePass(c, sr)
	// a leaves; b now names b2; c leaves but e applies c's object; d
	// leaves while its delete fails; e now names c (its old object goes).
	sr.Spec.Items = []v1alpha1.SyncItem{
		item("b", v1alpha1.CreateAndSync, configMap("default", "b2", "v")),
		item("e", v1alpha1.CreateAndSync, configMap("default", "c", "v")),
	}
	c.Fail(fakecluster.Delete, "ConfigMap", "d", apierrors.NewInternalError(errors.New("etcd")), 1)
	res := fakePass(c, sr)
	for name, want := range map[string]bool{"a": false, "b": false, "b2": true, "c": true, "d": true, "e": false} {
		if got := cmIn(t, c, name) != nil; got != want {
			t.Errorf("ConfigMap %s present %t, want %t", name, got, want)
		}
	}
	if st := itemStatus(t, res, "d"); st.State != v1alpha1.ItemError || st.Object == nil || !strings.Contains(st.Message, "deleting the object failed") || !res.Retry {
		t.Errorf("d, delete failed: %+v", st)
	}
	if len(res.Items) != 3 {
		t.Errorf("items %+v: want b, e and d (still in the inventory)", res.Items)
	}
	res = fakePass(c, sr)
	if cmIn(t, c, "d") != nil || len(res.Items) != 2 {
		t.Errorf("d's delete was not retried: items %+v", res.Items)
	}

	// b2's object moves to b3 while a new item f takes b2: b2 stays.
	sr.Spec.Items = []v1alpha1.SyncItem{
		item("b", v1alpha1.CreateAndSync, configMap("default", "b3", "v")),
		item("e", v1alpha1.CreateAndSync, configMap("default", "c", "v")),
		item("f", v1alpha1.CreateAndSync, configMap("default", "b2", "v")),
	}
	fakePass(c, sr)
	if cmIn(t, c, "b2") == nil || cmIn(t, c, "b3") == nil {
		t.Error("an object another item now applies was pruned")
	}

	// A removed item the grant no longer allows: left, forgotten.
	sr.Status.Items = append(sr.Status.Items, v1alpha1.ItemStatus{Name: "outside", Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: "default", Name: "s"}})
	res = fakePass(c, sr)
	if st := itemStatus(t, res, "outside"); st.State != v1alpha1.ItemRefused || st.Object != nil || !strings.HasPrefix(st.Message, "removed from the spec; not deleted") {
		t.Errorf("outside the grant: %+v", st)
	}
}

// TestFakeUnreachable: the first transport error ends the pass: later
// items are "not attempted", the inventory (removed items too) is kept,
// and the pass is retried; syncitems.Unreachable says the same without a try.
func TestFakeUnreachable(t *testing.T) {
	c := fakeSKR(t)
	sr := syncResource("u", item("a", v1alpha1.CreateAndSync, configMap("default", "a", "v")), item("b", v1alpha1.CreateAndSync, configMap("default", "b", "v")),
		item("gone", v1alpha1.CreateAndSync, configMap("default", "gone", "v")))
	fakePass(c, sr)
	sr.Spec.Items = sr.Spec.Items[:2]
	c.Fail(fakecluster.Get, "ConfigMap", "a", fakecluster.ErrUnreachable, 1)
	res := fakePass(c, sr)
	if res.Unreachable == nil || !res.Retry {
		t.Fatalf("unreachable: %+v", res)
	}
	if st := itemStatus(t, res, "a"); !strings.HasPrefix(st.Message, "the runtime cannot be reached") || st.Object == nil {
		t.Errorf("a: %+v", st)
	}
	if st := itemStatus(t, res, "b"); st.Message != "not attempted: the runtime cannot be reached" || st.Object == nil {
		t.Errorf("b: %+v", st)
	}
	if st := itemStatus(t, res, "gone"); !strings.Contains(st.Message, "not deleted yet") || st.Object == nil || cmIn(t, c, "gone") == nil {
		t.Errorf("gone: %+v", st)
	}
	if st, cond := res.Summary(); st != v1alpha1.StateError || cond.Reason != "RuntimeUnreachable" {
		t.Errorf("summary %s %+v", st, cond)
	}

	un := syncitems.Unreachable(sr, fakecluster.ErrUnreachable)
	if !un.Retry || len(un.Items) != 3 || un.Items[0].Object == nil || un.Items[2].Name != "gone" {
		t.Errorf("Unreachable: %+v", un)
	}
}

// TestFakeSubresource: an item's status is applied to the status
// subresource after the object; a subresource naming another object or
// without a status is invalid.
func TestFakeSubresource(t *testing.T) {
	c := fakeSKR(t)
	widget := raw(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"default"},"spec":{"size":1}}`)
	withStatus := func(name string, s v1alpha1.Strategy, sub string) v1alpha1.SyncItem {
		it := item(name, s, widget)
		it.Subresource = &k8sruntime.RawExtension{Raw: []byte(sub)}
		return it
	}
	res := fakePass(c, syncResource("w", withStatus("w", v1alpha1.CreateAndSync, `{"status":{"phase":"Ready"}}`)))
	if st := itemStatus(t, res, "w"); st.State != v1alpha1.ItemReady || st.Message != "applied with status" {
		t.Fatalf("w: %+v", st)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(widgetGVK)
	if err := c.Get(bgCtx, client.ObjectKey{Namespace: "default", Name: "w"}, u); err != nil {
		t.Fatal(err)
	}
	if phase, _, _ := unstructured.NestedString(u.Object, "status", "phase"); phase != "Ready" {
		t.Errorf("status %v", u.Object["status"])
	}
	if c.Count(fakecluster.StatusPatch, "Widget") != 1 {
		t.Errorf("status writes %v", c.Writes())
	}
	c2 := fakeSKR(t)
	if st := itemStatus(t, fakePass(c2, syncResource("w", withStatus("w", v1alpha1.CreateAndIgnore, `{"status":{"phase":"New"}}`))), "w"); st.Message != "created with status" {
		t.Errorf("CreateAndIgnore with status: %+v", st)
	}
	for sub, want := range map[string]string{
		`{"kind":"Gadget","status":{}}`: `it names "Gadget" where the resource has "Widget"`,
		`{"spec":{}}`:                   "no status object",
		`{`:                             "invalid subresource",
	} {
		if st := itemStatus(t, fakePass(c, syncResource("w", withStatus("w", v1alpha1.CreateAndSync, sub))), "w"); st.State != v1alpha1.ItemError || !strings.Contains(st.Message, want) {
			t.Errorf("subresource %s: %+v, want %q", sub, st, want)
		}
	}
	c.Fail(fakecluster.StatusPatch, "Widget", "", apierrors.NewInternalError(errors.New("etcd")), 1)
	if st := itemStatus(t, fakePass(c, syncResource("w", withStatus("w", v1alpha1.CreateAndSync, `{"status":{}}`))), "w"); !strings.HasPrefix(st.Message, "apply status: ") || st.Object == nil {
		t.Errorf("status refused: %+v", st)
	}
}

// TestFakeCleanup: Cleanup deletes the inventory and the CreateAndSync
// objects that carry this SyncResource's annotation, nothing else, and
// fails while a deletion fails.
func TestFakeCleanup(t *testing.T) {
	c := fakeSKR(t, owned("foreign", ""), owned("theirs", "kcp-system/other"))
	sr := syncResource("c",
		item("a", v1alpha1.CreateAndSync, configMap("default", "a", "v")),
		item("i", v1alpha1.CreateAndIgnore, configMap("default", "i", "v")),
		item("foreign", v1alpha1.CreateAndSync, configMap("default", "foreign", "v")),
		item("theirs", v1alpha1.CreateAndSync, configMap("default", "theirs", "v")),
		item("secret", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"default"}}`)),
		item("bad", v1alpha1.CreateAndSync, raw(`{`)),
	)
	fakePass(c, sr)
	sr.Status.Items = append(sr.Status.Items, v1alpha1.ItemStatus{Name: "outside", Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "Service", Namespace: "default", Name: "s"}},
		v1alpha1.ItemStatus{Name: "unserved", Object: &v1alpha1.ObjectReference{APIVersion: "example.com/v1", Kind: "Gadget", Namespace: "default", Name: "g"}})
	c.Fail(fakecluster.Delete, "ConfigMap", "a", fakecluster.ErrUnreachable, 1)
	if err := syncitems.Cleanup(bgCtx, c, fakeGrant, sr); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("a failed delete: %v", err)
	}
	if cmIn(t, c, "i") == nil || c.Count(fakecluster.Delete, "") != 0 {
		t.Error("an unreachable runtime: Cleanup went on after the first failure")
	}
	if err := syncitems.Cleanup(bgCtx, c, fakeGrant, sr); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{"a": false, "i": false, "foreign": true, "theirs": true} {
		if got := cmIn(t, c, name) != nil; got != want {
			t.Errorf("ConfigMap %s present %t, want %t", name, got, want)
		}
	}

	// A CreateAndIgnore or Delete item's object that is not in the
	// inventory is not this SyncResource's to clean up.
	c = fakeSKR(t, owned("ign", "kcp-system/c"), owned("del", "kcp-system/c"))
	fresh := syncResource("c", item("ign", v1alpha1.CreateAndIgnore, configMap("default", "ign", "v")), item("del", v1alpha1.Delete, configMap("default", "del", "")))
	if err := syncitems.Cleanup(bgCtx, c, fakeGrant, fresh); err != nil {
		t.Fatal(err)
	}
	if cmIn(t, c, "ign") == nil || cmIn(t, c, "del") == nil {
		t.Error("Cleanup deleted objects outside its inventory and CreateAndSync items")
	}
}

// TestFakeServiceAccounts: the ServiceAccounts the inventories name.
func TestFakeServiceAccounts(t *testing.T) {
	sa := func(ns, name string) v1alpha1.ItemStatus {
		return v1alpha1.ItemStatus{Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ServiceAccount", Namespace: ns, Name: name}}
	}
	srs := []v1alpha1.SyncResource{{Status: v1alpha1.SyncResourceStatus{Items: []v1alpha1.ItemStatus{sa("b", "y"), sa("", "cluster"), {Name: "none"}}}},
		{Status: v1alpha1.SyncResourceStatus{Items: []v1alpha1.ItemStatus{sa("a", "x"),
			{Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "a", Name: "cm"}}}}}}
	if got := strings.Join(syncitems.ServiceAccounts(srs), ","); got != "a/x,b/y" {
		t.Errorf("ServiceAccounts %s", got)
	}
}
