package mirror_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var (
	kcp    client.Client // counts its writes in writes
	writes atomic.Int64
	skr    client.Client // built as module-sync builds it (skrClient)
	skrEnv *testenv.Cluster
	ctx    = context.Background()
)

var (
	serverless = mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "serverlesses"}, Module: "serverless"}
	keda       = mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "*", Resource: "kedas"}, Module: "keda-module"}
	absentCRD  = mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "nothings"}, Module: "nothing"}
)

func moduleCRD(plural, kind string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".operator.kyma-project.io"},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: "operator.kyma-project.io", Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Plural: plural, Kind: kind, ListKind: kind + "List", Singular: strings.ToLower(kind)},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1alpha1", Served: true, Storage: true,
				Subresources: &apiextensionsv1.CustomResourceSubresources{Status: &apiextensionsv1.CustomResourceSubresourceStatus{}},
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec":   {Type: "object", XPreserveUnknownFields: ptr(true)},
						"status": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// Every test here needs the API servers: each calls testenv.SkipIfShort
// first, and under -short none is started.
func TestMain(m *testing.M) {
	flag.Parse()
	if testing.Short() {
		os.Exit(m.Run())
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	env, err := testenv.Start("kcp", "skr")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer func() {
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}()
	skrEnv = env.Cluster("skr")
	if _, err := envtest.InstallCRDs(skrEnv.Config, envtest.CRDInstallOptions{CRDs: []*apiextensionsv1.CustomResourceDefinition{
		moduleCRD("serverlesses", "Serverless"), moduleCRD("kedas", "Keda"), moduleCRD("bigs", "Big"), moduleCRD("manies", "Many"),
	}}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if skr, err = skrClient("skr", ""); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.NewWithWatch(env.Cluster("kcp").Config, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	count := func() { writes.Add(1) }
	kcp = interceptor.NewClient(c, interceptor.Funcs{
		Create: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.CreateOption) error {
			count()
			return c.Create(ctx, o, opts...)
		},
		Update: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.UpdateOption) error {
			count()
			return c.Update(ctx, o, opts...)
		},
		Patch: func(ctx context.Context, c client.WithWatch, o client.Object, p client.Patch, opts ...client.PatchOption) error {
			count()
			return c.Patch(ctx, o, p, opts...)
		},
		Delete: func(ctx context.Context, c client.WithWatch, o client.Object, opts ...client.DeleteOption) error {
			count()
			return c.Delete(ctx, o, opts...)
		},
		SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, o client.Object, opts ...client.SubResourceUpdateOption) error {
			count()
			return c.SubResource(sub).Update(ctx, o, opts...)
		},
		SubResourcePatch: func(ctx context.Context, c client.Client, sub string, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
			count()
			return c.SubResource(sub).Patch(ctx, o, p, opts...)
		},
	})
	return m.Run()
}

// skrClient is the client of the SKR as module-sync gets it: through
// skrclient from a runtime's kubeconfig. With server set, the kubeconfig
// points there instead.
func skrClient(key, server string) (client.Client, error) {
	kubeconfig, err := skrEnv.Kubeconfig(server)
	if err != nil {
		return nil, err
	}
	clients := &skrclient.KubeconfigClients{Scheme: clientgoscheme.Scheme, NewMapper: skrclient.DynamicRESTMapper, Timeout: 5 * time.Second}
	return clients.For(ctx, key, kubeconfig)
}

var seq int

// setup creates a KCP namespace with a Kyma and an SKR namespace for one test.
func setup(t *testing.T) (mirror.Kyma, string) {
	t.Helper()
	seq++
	ns := fmt.Sprintf("mirror-%d", seq)
	for _, c := range []client.Client{kcp, skr} {
		nsObj := &unstructured.Unstructured{}
		nsObj.SetAPIVersion("v1")
		nsObj.SetKind("Namespace")
		nsObj.SetName(ns)
		if err := c.Create(ctx, nsObj); err != nil {
			t.Fatal(err)
		}
	}
	k := &unstructured.Unstructured{}
	k.SetAPIVersion("operator.kyma-project.io/v1beta2")
	k.SetKind("Kyma")
	k.SetName("kyma-" + ns)
	k.SetNamespace(ns)
	if err := kcp.Create(ctx, k); err != nil {
		t.Fatal(err)
	}
	return mirror.Kyma{Name: k.GetName(), Namespace: ns, UID: k.GetUID(), RuntimeID: "runtime-" + ns}, ns
}

func moduleCR(kind, ns, name string, spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetAPIVersion("operator.kyma-project.io/v1alpha1")
	u.SetKind(kind)
	u.SetNamespace(ns)
	u.SetName(name)
	return u
}

func create(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if err := skr.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
}

func moduleConfig(t *testing.T, kyma mirror.Kyma, module string) *v1alpha1.ModuleConfig {
	t.Helper()
	mc := &v1alpha1.ModuleConfig{}
	if err := kcp.Get(ctx, client.ObjectKey{Namespace: kyma.Namespace, Name: mirror.Name(kyma.Name, module)}, mc); err != nil {
		t.Fatalf("ModuleConfig for %s: %v", module, err)
	}
	return mc
}

func resource(t *testing.T, mc *v1alpha1.ModuleConfig) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(mc.Spec.Resource.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func syncOnce(t *testing.T, m *mirror.Mirror, kyma mirror.Kyma) (mirror.Result, int64) {
	t.Helper()
	before := writes.Load()
	res, err := m.Sync(ctx, skr, kyma)
	if err != nil {
		t.Fatal(err)
	}
	return res, writes.Load() - before
}

func TestMirror(t *testing.T) {
	testenv.SkipIfShort(t)
	kyma, ns := setup(t)
	m := &mirror.Mirror{KCP: kcp, Resources: []mirror.ModuleResource{serverless, keda, absentCRD}}

	sl := moduleCR("Serverless", ns, "default", map[string]any{"replicas": int64(2), "registry": map[string]any{"internal": true}})
	sl.SetLabels(map[string]string{"team": "serverless"})
	sl.SetAnnotations(map[string]string{"not": "mirrored"})
	create(t, sl)
	create(t, moduleCR("Keda", ns, "default", map[string]any{"logging": "debug"}))

	res, w := syncOnce(t, m, kyma)
	if res.Created != 2 || res.Deleted != 0 || w != 4 {
		t.Fatalf("first pass: %+v with %d writes, want 2 created with 4 writes (object and status each)", res, w)
	}
	mc := moduleConfig(t, kyma, "serverless")
	got := resource(t, mc)
	want := map[string]any{
		"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Serverless",
		"metadata": map[string]any{"name": "default", "namespace": ns, "generation": float64(1), "labels": map[string]any{"team": "serverless"}},
		"spec":     map[string]any{"replicas": float64(2), "registry": map[string]any{"internal": true}},
	}
	if gotJSON, wantJSON := fmt.Sprint(got), fmt.Sprint(want); gotJSON != wantJSON {
		t.Errorf("trimmed resource\n got %s\nwant %s", gotJSON, wantJSON)
	}
	if mc.Spec.Kyma != kyma.Name || mc.Spec.Module != "serverless" {
		t.Errorf("spec: %+v", mc.Spec)
	}
	if mc.Labels[mirror.LabelKymaName] != kyma.Name || mc.Labels[mirror.LabelModuleName] != "serverless" || mc.Labels[contract.LabelRuntimeID] != kyma.RuntimeID {
		t.Errorf("labels: %v", mc.Labels)
	}
	if len(mc.OwnerReferences) != 1 || mc.OwnerReferences[0].UID != kyma.UID || mc.OwnerReferences[0].Kind != "Kyma" {
		t.Errorf("owner references: %+v", mc.OwnerReferences)
	}
	if mc.Status.State != v1alpha1.StateReady || mc.Status.ObservedGeneration != mc.Generation || mc.Status.LastOperation == nil ||
		!strings.Contains(mc.Status.LastOperation.Operation, ns+"/default generation 1") {
		t.Errorf("status: %+v", mc.Status)
	}
	if kd := moduleConfig(t, kyma, "keda-module"); kd.Spec.Module != "keda-module" {
		t.Errorf("configured module name not used: %+v", kd.Spec)
	}

	t.Run("nothing changed: no writes", func(t *testing.T) {
		if res, w := syncOnce(t, m, kyma); w != 0 || res.Unchanged != 2 {
			t.Errorf("%+v with %d writes", res, w)
		}
	})

	t.Run("status and annotations of the Module CR are not mirrored: no writes", func(t *testing.T) {
		live := moduleCR("Serverless", ns, "default", nil)
		if err := skr.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
			t.Fatal(err)
		}
		live.SetAnnotations(map[string]string{"not": "mirrored either"})
		if err := skr.Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(live.Object, "Ready", "status", "state")
		if err := skr.Status().Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		if res, w := syncOnce(t, m, kyma); w != 0 {
			t.Errorf("%+v with %d writes", res, w)
		}
	})

	t.Run("a spec change is mirrored", func(t *testing.T) {
		live := moduleCR("Serverless", ns, "default", nil)
		if err := skr.Get(ctx, client.ObjectKeyFromObject(live), live); err != nil {
			t.Fatal(err)
		}
		_ = unstructured.SetNestedField(live.Object, int64(5), "spec", "replicas")
		if err := skr.Update(ctx, live); err != nil {
			t.Fatal(err)
		}
		res, w := syncOnce(t, m, kyma)
		if res.Updated != 1 || res.Unchanged != 1 || w != 2 {
			t.Errorf("%+v with %d writes", res, w)
		}
		mc := moduleConfig(t, kyma, "serverless")
		r := resource(t, mc)
		if spec := r["spec"].(map[string]any); spec["replicas"] != float64(5) {
			t.Errorf("spec not mirrored: %v", spec)
		}
		if md := r["metadata"].(map[string]any); md["generation"] != float64(2) {
			t.Errorf("generation not mirrored: %v", md)
		}
		if !strings.Contains(mc.Status.LastOperation.Operation, "generation 2") || mc.Status.ObservedGeneration != mc.Generation {
			t.Errorf("status: %+v", mc.Status)
		}
	})

	t.Run("a second Module CR of a kind: the oldest is mirrored, state Warning", func(t *testing.T) {
		// creationTimestamp has second precision; on a tie the name
		// decides, and "zzz-younger" sorts after "default" too.
		create(t, moduleCR("Serverless", ns, "zzz-younger", map[string]any{"replicas": int64(9)}))
		if _, err := m.Sync(ctx, skr, kyma); err != nil {
			t.Fatal(err)
		}
		mc := moduleConfig(t, kyma, "serverless")
		if md := resource(t, mc)["metadata"].(map[string]any); md["name"] != "default" {
			t.Errorf("mirrors %v, not the oldest", md["name"])
		}
		cond := meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored)
		if mc.Status.State != v1alpha1.StateWarning || cond == nil || cond.Reason != "MultipleModuleCRs" || !strings.Contains(cond.Message, ns+"/zzz-younger") {
			t.Errorf("status: %+v", mc.Status)
		}
		if err := skr.Delete(ctx, moduleCR("Serverless", ns, "zzz-younger", nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := m.Sync(ctx, skr, kyma); err != nil {
			t.Fatal(err)
		}
		if mc := moduleConfig(t, kyma, "serverless"); mc.Status.State != v1alpha1.StateReady {
			t.Errorf("state after the second CR left: %s", mc.Status.State)
		}
	})

	t.Run("a deleted Module CR: its ModuleConfig is deleted", func(t *testing.T) {
		if err := skr.Delete(ctx, moduleCR("Keda", ns, "default", nil)); err != nil {
			t.Fatal(err)
		}
		res, w := syncOnce(t, m, kyma)
		if res.Deleted != 1 || w != 1 {
			t.Errorf("%+v with %d writes", res, w)
		}
		err := kcp.Get(ctx, client.ObjectKey{Namespace: ns, Name: mirror.Name(kyma.Name, "keda-module")}, &v1alpha1.ModuleConfig{})
		if !apierrors.IsNotFound(err) {
			t.Errorf("ModuleConfig still there: %v", err)
		}
	})

	t.Run("another Kyma's ModuleConfigs are left alone; Remove deletes only this Kyma's", func(t *testing.T) {
		// Both runtimes' SKR is the same API server here (so the other Kyma
		// mirrors the same Serverless CR); what counts is that each Kyma's
		// pass touches only its own ModuleConfigs.
		other, _ := setup(t)
		if res, err := m.Sync(ctx, skr, other); err != nil || res.Created != 1 {
			t.Fatalf("%+v, %v", res, err)
		}
		if res, w := syncOnce(t, m, kyma); w != 0 || res.Deleted != 0 {
			t.Errorf("%+v with %d writes", res, w)
		}
		n, err := m.Remove(ctx, kyma)
		if err != nil || n != 1 {
			t.Errorf("Remove: %d, %v", n, err)
		}
		list := &v1alpha1.ModuleConfigList{}
		if err := kcp.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 0 {
			t.Errorf("left after Remove: %d, %v", len(list.Items), err)
		}
		moduleConfig(t, other, "serverless")
	})
}

func TestUnreachableRuntimeDeletesNothing(t *testing.T) {
	testenv.SkipIfShort(t)
	kyma, ns := setup(t)
	m := &mirror.Mirror{KCP: kcp, Resources: []mirror.ModuleResource{serverless, keda}}
	create(t, moduleCR("Serverless", ns, "default", map[string]any{}))
	if _, err := m.Sync(ctx, skr, kyma); err != nil {
		t.Fatal(err)
	}
	deadClient, err := skrClient("unreachable", "https://127.0.0.1:1")
	if err != nil {
		t.Fatal(err)
	}
	before := writes.Load()
	if _, err := m.Sync(ctx, deadClient, kyma); err == nil {
		t.Error("no error for an unreachable runtime")
	}
	if w := writes.Load() - before; w != 0 {
		t.Errorf("%d writes for an unreachable runtime", w)
	}
	moduleConfig(t, kyma, "serverless")
}

// TestBounds: a Module CR over MaxResourceBytes and more than MaxModuleCRs
// Module CRs of a resource are not mirrored; the ModuleConfig keeps its
// spec and says why (the list is read in pages of ListPage).
func TestBounds(t *testing.T) {
	testenv.SkipIfShort(t)
	kyma, ns := setup(t)
	big := mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "bigs"}, Module: "big"}
	many := mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "manies"}, Module: "many"}
	m := &mirror.Mirror{KCP: kcp, Resources: []mirror.ModuleResource{big, many}}
	create(t, moduleCR("Big", ns, "default", map[string]any{"v": "small"}))
	create(t, moduleCR("Many", ns, "cr-000", map[string]any{"v": "first"}))
	syncOnce(t, m, kyma)

	u := moduleCR("Big", ns, "default", nil)
	if err := skr.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = map[string]any{"v": strings.Repeat("x", mirror.MaxResourceBytes)}
	if err := skr.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= mirror.MaxModuleCRs; i++ {
		create(t, moduleCR("Many", ns, fmt.Sprintf("cr-%03d", i), map[string]any{"v": "more"}))
	}
	syncOnce(t, m, kyma)
	for module, reason := range map[string]string{"big": "TooLarge", "many": "TooMany"} {
		mc := moduleConfig(t, kyma, module)
		c := meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored)
		if mc.Status.State != v1alpha1.StateError || c == nil || c.Reason != reason || c.Status != metav1.ConditionFalse {
			t.Errorf("%s: state %s, condition %+v; want Error, %s", module, mc.Status.State, c, reason)
		}
		if strings.Contains(string(mc.Spec.Resource.Raw), "xxxx") || strings.Contains(string(mc.Spec.Resource.Raw), "more") {
			t.Errorf("%s: the refused Module CR was mirrored: %.200s", module, mc.Spec.Resource.Raw)
		}
	}
	if res, w := syncOnce(t, m, kyma); w != 0 {
		t.Errorf("a second pass over the same refusals wrote %d times: %+v", w, res)
	}

	t.Run("without a ModuleConfig yet, nothing is created", func(t *testing.T) {
		kyma2, _ := setup(t)
		if res, w := syncOnce(t, m, kyma2); w != 0 || res.Created != 0 {
			t.Errorf("%+v with %d writes", res, w)
		}
	})
}
