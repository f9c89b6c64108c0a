package syncitems_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var (
	skr     client.Client // the engine's client, built as module-sync builds it (skrClient)
	skrEnv  *testenv.Cluster
	nsSeq   int
	bgCtx   = context.Background()
	clients = &skrclient.KubeconfigClients{Scheme: clientgoscheme.Scheme, NewMapper: skrclient.DynamicRESTMapper, Timeout: 5 * time.Second}
	// grant of the tests' SyncResources: the kinds they use, in "default"
	// and every namespace made by namespace(t).
	grant = grants.Grant{Name: "ModuleGrant kcp-system/test", Module: "test", Found: true, Spec: v1alpha1.ModuleGrantSpec{
		Kinds: []v1alpha1.GrantedKind{
			{Kind: "ConfigMap"}, {Kind: "Secret"}, {Group: "example.com", Kind: "Widget"}, {Group: "operator.kyma-project.io", Kind: "Kyma"},
		},
		Namespaces: []string{"default"},
	}}
)

// Every test here needs the SKR API server: each calls
// testenv.SkipIfShort first, and under -short none is started.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	env, err := testenv.Start("skr")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	skrEnv = env.Cluster("skr")
	skr, err = skrClient("skr", "")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		_ = env.Stop()
		os.Exit(1)
	}
	code := m.Run()
	if err := env.Stop(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}

// skrClient is the client of the SKR as module-sync gets it: through
// skrclient from a runtime's kubeconfig (unstructured objects, a REST mapper
// that discovers an API group when it is first used). With server set, the
// kubeconfig points there instead.
func skrClient(key, server string) (client.Client, error) {
	kubeconfig, err := skrEnv.Kubeconfig(server)
	if err != nil {
		return nil, err
	}
	return clients.For(bgCtx, key, kubeconfig)
}

// namespace creates a fresh namespace in the SKR for one test.
func namespace(t *testing.T) string {
	t.Helper()
	nsSeq++
	ns := fmt.Sprintf("apply-%d", nsSeq)
	if err := skr.Create(bgCtx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	grant.Spec.Namespaces = append(grant.Spec.Namespaces, ns)
	return ns
}

func raw(format string, args ...any) k8sruntime.RawExtension {
	return k8sruntime.RawExtension{Raw: []byte(fmt.Sprintf(format, args...))}
}

func configMap(ns, name, value string) k8sruntime.RawExtension {
	return raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q,"labels":{"app":"demo"}},"data":{"key":%q}}`, name, ns, value)
}

func item(name string, s v1alpha1.Strategy, res k8sruntime.RawExtension) v1alpha1.SyncItem {
	return v1alpha1.SyncItem{Name: name, Strategy: s, Resource: res}
}

func syncResource(name string, items ...v1alpha1.SyncItem) *v1alpha1.SyncResource {
	return &v1alpha1.SyncResource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kcp-system"},
		Spec:       v1alpha1.SyncResourceSpec{Kyma: "kyma-1", Items: items},
	}
}

// pass runs Apply and stores the items in status, as the reconciler does.
func pass(t *testing.T, sr *v1alpha1.SyncResource) syncitems.Result {
	t.Helper()
	res := syncitems.Apply(bgCtx, skr, grant, sr)
	sr.Status.Items = res.Items
	return res
}

func itemStatus(t *testing.T, res syncitems.Result, name string) v1alpha1.ItemStatus {
	t.Helper()
	for _, it := range res.Items {
		if it.Name == name {
			return it
		}
	}
	t.Fatalf("no status for item %q in %+v", name, res.Items)
	return v1alpha1.ItemStatus{}
}

func getConfigMap(t *testing.T, ns, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := skr.Get(bgCtx, client.ObjectKey{Namespace: ns, Name: name}, cm); err != nil {
		t.Fatalf("get ConfigMap %s/%s: %v", ns, name, err)
	}
	return cm
}

func absent(t *testing.T, ns, name string) bool {
	t.Helper()
	err := skr.Get(bgCtx, client.ObjectKey{Namespace: ns, Name: name}, &corev1.ConfigMap{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func TestStrategies(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	// As if module-sync had created it for this SyncResource earlier.
	if err := skr.Create(bgCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "doomed", Namespace: ns,
		Annotations: map[string]string{syncitems.OwnerAnnotation: "kcp-system/strategies"}}}); err != nil {
		t.Fatal(err)
	}
	sr := syncResource("strategies",
		item("synced", v1alpha1.CreateAndSync, configMap(ns, "synced", "v1")),
		item("ignored", v1alpha1.CreateAndIgnore, configMap(ns, "ignored", "v1")),
		item("doomed", v1alpha1.Delete, configMap(ns, "doomed", "")),
	)
	res := pass(t, sr)
	if st, cond := res.Summary(); st != v1alpha1.StateReady || cond.Status != metav1.ConditionTrue || res.Retry {
		t.Fatalf("summary %s %+v retry=%v, items %+v", st, cond, res.Retry, res.Items)
	}
	for _, name := range []string{"synced", "ignored", "doomed"} {
		if st := itemStatus(t, res, name); st.State != v1alpha1.ItemReady {
			t.Errorf("item %s: %+v", name, st)
		}
	}
	synced := getConfigMap(t, ns, "synced")
	if synced.Data["key"] != "v1" || synced.Labels["app"] != "demo" || synced.Annotations[syncitems.OwnerAnnotation] != "kcp-system/strategies" {
		t.Errorf("synced ConfigMap: %+v", synced.ObjectMeta)
	}
	var managers []string
	for _, mf := range synced.ManagedFields {
		managers = append(managers, string(mf.Operation)+":"+mf.Manager)
	}
	if strings.Join(managers, ",") != "Apply:module-sync" {
		t.Errorf("synced ConfigMap managed by %v, want server-side apply by module-sync", managers)
	}
	if getConfigMap(t, ns, "ignored").Data["key"] != "v1" {
		t.Error("ignored ConfigMap not created")
	}
	if !absent(t, ns, "doomed") {
		t.Error("Delete item left its ConfigMap")
	}
	if st := itemStatus(t, res, "doomed"); st.Object != nil {
		t.Errorf("a Delete item owns no object: %+v", st)
	}

	t.Run("drift is corrected for CreateAndSync, left alone for CreateAndIgnore", func(t *testing.T) {
		for _, name := range []string{"synced", "ignored"} {
			cm := getConfigMap(t, ns, name)
			cm.Data["key"] = "edited in the SKR"
			if err := skr.Update(bgCtx, cm, client.FieldOwner("kubectl-edit")); err != nil {
				t.Fatal(err)
			}
		}
		res := pass(t, sr)
		if st, _ := res.Summary(); st != v1alpha1.StateReady {
			t.Fatalf("items %+v", res.Items)
		}
		if got := getConfigMap(t, ns, "synced").Data["key"]; got != "v1" {
			t.Errorf("CreateAndSync drift not corrected: %q", got)
		}
		if got := getConfigMap(t, ns, "ignored").Data["key"]; got != "edited in the SKR" {
			t.Errorf("CreateAndIgnore object changed: %q", got)
		}
	})

	t.Run("a changed spec is applied for CreateAndSync, not for CreateAndIgnore", func(t *testing.T) {
		sr.Spec.Items[0].Resource = configMap(ns, "synced", "v2")
		sr.Spec.Items[1].Resource = configMap(ns, "ignored", "v2")
		pass(t, sr)
		if got := getConfigMap(t, ns, "synced").Data["key"]; got != "v2" {
			t.Errorf("CreateAndSync not updated: %q", got)
		}
		if got := getConfigMap(t, ns, "ignored").Data["key"]; got != "edited in the SKR" {
			t.Errorf("CreateAndIgnore object changed: %q", got)
		}
	})

	t.Run("a CreateAndIgnore object deleted in the SKR is created again", func(t *testing.T) {
		if err := skr.Delete(bgCtx, getConfigMap(t, ns, "ignored")); err != nil {
			t.Fatal(err)
		}
		pass(t, sr)
		if got := getConfigMap(t, ns, "ignored").Data["key"]; got != "v2" {
			t.Errorf("CreateAndIgnore not re-created from the spec: %q", got)
		}
	})
}

func TestPrune(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns}, Data: map[string]string{"key": "theirs"}}
	if err := skr.Create(bgCtx, foreign); err != nil {
		t.Fatal(err)
	}
	sr := syncResource("prune",
		item("a", v1alpha1.CreateAndSync, configMap(ns, "a", "1")),
		item("b", v1alpha1.CreateAndSync, configMap(ns, "b", "1")),
		item("c", v1alpha1.CreateAndIgnore, configMap(ns, "c", "1")),
		item("foreign", v1alpha1.CreateAndIgnore, configMap(ns, "foreign", "ours")),
		item("moves", v1alpha1.CreateAndSync, configMap(ns, "old-name", "1")),
	)
	res := pass(t, sr)
	if st, _ := res.Summary(); st != v1alpha1.StateReady {
		t.Fatalf("items %+v", res.Items)
	}
	if st := itemStatus(t, res, "foreign"); st.Object != nil || !strings.Contains(st.Message, "not created by module-sync") {
		t.Errorf("a pre-existing object is not module-sync's: %+v", st)
	}

	sr.Spec.Items = []v1alpha1.SyncItem{
		sr.Spec.Items[0],
		item("moves", v1alpha1.CreateAndSync, configMap(ns, "new-name", "1")),
	}
	res = pass(t, sr)
	if len(res.Items) != 2 {
		t.Errorf("removed items still in status: %+v", res.Items)
	}
	for _, name := range []string{"b", "c", "old-name"} {
		if !absent(t, ns, name) {
			t.Errorf("ConfigMap %s not pruned", name)
		}
	}
	for _, name := range []string{"a", "new-name"} {
		getConfigMap(t, ns, name)
	}
	if got := getConfigMap(t, ns, "foreign").Data["key"]; got != "theirs" {
		t.Errorf("a pre-existing object was touched: %q", got)
	}
}

func TestBadItemsDoNotStopOthers(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	sr := syncResource("bad",
		item("secret", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":%q},"stringData":{"password":"x"}}`, ns)),
		item("no-crd", v1alpha1.CreateAndSync, raw(`{"apiVersion":"example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":%q},"spec":{}}`, ns)),
		item("no-name", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":%q}}`, ns)),
		item("no-kind", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","metadata":{"name":"x","namespace":%q}}`, ns)),
		item("not-json", v1alpha1.CreateAndSync, raw(`[1,2]`)),
		item("no-namespace", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}`)),
		item("rejected-by-api", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"UPPER","namespace":%q}}`, ns)),
		item("good", v1alpha1.CreateAndSync, configMap(ns, "good", "1")),
	)
	res := pass(t, sr)
	want := map[string]struct {
		state v1alpha1.ItemState
		msg   string
	}{
		"secret":          {v1alpha1.ItemRefused, "secrets are not synced"},
		"no-crd":          {v1alpha1.ItemError, "no such kind in the runtime: example.com/v1, Kind=Widget"},
		"no-name":         {v1alpha1.ItemError, "metadata.name must be set"},
		"no-kind":         {v1alpha1.ItemError, "apiVersion and kind must be set"},
		"not-json":        {v1alpha1.ItemError, "invalid object"},
		"no-namespace":    {v1alpha1.ItemError, "metadata.namespace must be set"},
		"rejected-by-api": {v1alpha1.ItemError, "apply: "},
		"good":            {v1alpha1.ItemReady, "applied"},
	}
	for name, w := range want {
		st := itemStatus(t, res, name)
		if st.State != w.state || !strings.Contains(st.Message, w.msg) {
			t.Errorf("item %s: got %s %q, want %s containing %q", name, st.State, st.Message, w.state, w.msg)
		}
	}
	getConfigMap(t, ns, "good")
	err := skr.Get(bgCtx, client.ObjectKey{Namespace: ns, Name: "s"}, &corev1.Secret{})
	if !apierrors.IsNotFound(err) {
		t.Errorf("the Secret reached the SKR: %v", err)
	}
	st, cond := res.Summary()
	if st != v1alpha1.StateError || cond.Reason != "ItemsFailed" || !strings.Contains(cond.Message, "no-crd") || !strings.Contains(cond.Message, "refused: secret") {
		t.Errorf("summary %s %+v", st, cond)
	}
	if !res.Retry || res.Unreachable != nil {
		t.Errorf("a missing kind is retried, the runtime was reachable: %+v", res)
	}

	t.Run("only refused items: Warning, no retry", func(t *testing.T) {
		res := syncitems.Apply(bgCtx, skr, grant, syncResource("refused", sr.Spec.Items[0], sr.Spec.Items[7]))
		if st, cond := res.Summary(); st != v1alpha1.StateWarning || cond.Reason != "ItemsRefused" || res.Retry {
			t.Errorf("summary %s %+v retry=%v", st, cond, res.Retry)
		}
	})
}

func TestSubresource(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	kyma := func(channel string) k8sruntime.RawExtension {
		return raw(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":"k","namespace":%q},"spec":{"channel":%q},"status":{"state":"ignored"}}`, ns, channel)
	}
	it := item("kyma", v1alpha1.CreateAndSync, kyma("regular"))
	it.Subresource = &k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":"k"},"status":{"state":"Ready"}}`)}
	bad := item("bad-sub", v1alpha1.CreateAndSync, configMap(ns, "cm", "1"))
	bad.Subresource = &k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"other"},"status":{}}`)}
	res := pass(t, syncResource("sub", it, bad))
	if st := itemStatus(t, res, "kyma"); st.State != v1alpha1.ItemReady {
		t.Fatalf("item: %+v", st)
	}
	if st := itemStatus(t, res, "bad-sub"); st.State != v1alpha1.ItemError || !strings.Contains(st.Message, `names "other"`) {
		t.Errorf("a subresource for another object: %+v", st)
	}
	got := &unstructured.Unstructured{}
	got.SetAPIVersion("operator.kyma-project.io/v1beta2")
	got.SetKind("Kyma")
	if err := skr.Get(bgCtx, client.ObjectKey{Namespace: ns, Name: "k"}, got); err != nil {
		t.Fatal(err)
	}
	state, _, _ := unstructured.NestedString(got.Object, "status", "state")
	channel, _, _ := unstructured.NestedString(got.Object, "spec", "channel")
	if state != "Ready" || channel != "regular" {
		t.Errorf("Kyma in the SKR: status.state %q (want the subresource's Ready), spec.channel %q", state, channel)
	}
}

func TestCleanup(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	if err := skr.Create(bgCtx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: ns}}); err != nil {
		t.Fatal(err)
	}
	sr := syncResource("cleanup",
		item("synced", v1alpha1.CreateAndSync, configMap(ns, "synced", "1")),
		item("ignored", v1alpha1.CreateAndIgnore, configMap(ns, "ignored", "1")),
		item("foreign", v1alpha1.CreateAndIgnore, configMap(ns, "foreign", "1")),
	)
	pass(t, sr)
	other := syncResource("other", item("x", v1alpha1.CreateAndSync, configMap(ns, "others", "1")))
	pass(t, other)

	// The status may lag behind the spec (e.g. the SyncResource was deleted
	// right after an item was added): CreateAndSync items of the spec are
	// cleaned up too.
	sr.Spec.Items = append(sr.Spec.Items, item("late", v1alpha1.CreateAndSync, configMap(ns, "late", "1")))
	syncitems.Apply(bgCtx, skr, grant, sr) // status not stored
	if err := syncitems.Cleanup(bgCtx, skr, grant, sr); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"synced", "ignored", "late"} {
		if !absent(t, ns, name) {
			t.Errorf("%s not removed", name)
		}
	}
	getConfigMap(t, ns, "foreign")
	getConfigMap(t, ns, "others")
	if err := syncitems.Cleanup(bgCtx, skr, grant, sr); err != nil {
		t.Errorf("a second cleanup: %v", err)
	}
}

func TestUnreachableRuntime(t *testing.T) {
	testenv.SkipIfShort(t)
	c, err := skrClient("unreachable", "https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	sr := syncResource("unreachable",
		item("a", v1alpha1.CreateAndSync, configMap("default", "a", "1")),
		item("b", v1alpha1.CreateAndSync, configMap("default", "b", "1")),
		item("secret", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"default"}}`)),
	)
	sr.Status.Items = []v1alpha1.ItemStatus{
		{Name: "a", State: v1alpha1.ItemReady, Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "a"}},
		{Name: "gone", State: v1alpha1.ItemReady, Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "gone"}},
	}
	start := time.Now()
	res := syncitems.Apply(bgCtx, c, grant, sr)
	if res.Unreachable == nil || !res.Retry {
		t.Fatalf("unreachable runtime not reported: %+v", res)
	}
	if st, cond := res.Summary(); st != v1alpha1.StateError || cond.Reason != "RuntimeUnreachable" {
		t.Errorf("summary %s %+v", st, cond)
	}
	if a := itemStatus(t, res, "a"); a.State != v1alpha1.ItemError || a.Object == nil {
		t.Errorf("item a lost its inventory: %+v", a)
	}
	if b := itemStatus(t, res, "b"); !strings.Contains(b.Message, "not attempted") {
		t.Errorf("item b: %+v", b)
	}
	if g := itemStatus(t, res, "gone"); g.Object == nil || !strings.Contains(g.Message, "not deleted yet") {
		t.Errorf("removed item lost from the inventory: %+v", g)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("an unreachable runtime took %v: more than one attempt", d)
	}
	if err := syncitems.Cleanup(bgCtx, c, grant, sr); err == nil {
		t.Error("Cleanup succeeded against an unreachable runtime")
	}
}
