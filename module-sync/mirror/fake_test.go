package mirror_test

// The fake-cluster tier of the mirror (test/fakecluster): the KCP and the
// runtime in memory, so these run under -short; mirror_test.go runs the
// same logic against real API servers.

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

var (
	serverlessGVK = schema.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Serverless"}
	kedaGVK       = schema.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Keda"}
	fakeKyma      = mirror.Kyma{Name: "kyma-a", Namespace: "kcp-system", UID: "uid-kyma-a", RuntimeID: "runtime-a"}
	clock         = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
)

func kcpScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	return s
}

// fakes is a KCP and a runtime that serves Serverless and Keda (not
// Nothing) with objs in it.
func fakes(t *testing.T, objs ...client.Object) (kcp, skr *fakecluster.Cluster) {
	t.Helper()
	kcp = fakecluster.New(t, kcpScheme())
	skr = fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{serverlessGVK: false, kedaGVK: false}),
		fakecluster.WithObjects(objs...))
	return kcp, skr
}

// moduleCRAt is a Module CR created at second s.
func moduleCRAt(kind, name string, s int, spec map[string]any) *unstructured.Unstructured {
	u := moduleCR(kind, "kyma-system", name, spec)
	u.SetCreationTimestamp(metav1.NewTime(clock.Add(time.Duration(s) * time.Second)))
	u.SetGeneration(int64(s + 1))
	return u
}

func fakeMirror(kcp client.Client, resources ...mirror.ModuleResource) *mirror.Mirror {
	return &mirror.Mirror{KCP: kcp, Resources: resources, Now: func() metav1.Time { return clock }}
}

func getMC(t *testing.T, kcp client.Client, module string) *v1alpha1.ModuleConfig {
	t.Helper()
	mc := &v1alpha1.ModuleConfig{}
	if err := kcp.Get(ctx, client.ObjectKey{Namespace: fakeKyma.Namespace, Name: mirror.Name(fakeKyma.Name, module)}, mc); err != nil {
		t.Fatalf("ModuleConfig of %s: %v", module, err)
	}
	return mc
}

func mcAbsent(t *testing.T, kcp client.Client, module string) bool {
	t.Helper()
	err := kcp.Get(ctx, client.ObjectKey{Namespace: fakeKyma.Namespace, Name: mirror.Name(fakeKyma.Name, module)}, &v1alpha1.ModuleConfig{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return apierrors.IsNotFound(err)
}

func mirrored(t *testing.T, mc *v1alpha1.ModuleConfig) map[string]any {
	t.Helper()
	m := map[string]any{}
	if err := json.Unmarshal(mc.Spec.Resource.Raw, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// setSpec replaces the spec of a Module CR in skr.
func setSpec(t *testing.T, skr client.Client, kind, name string, spec map[string]any) {
	t.Helper()
	u := moduleCR(kind, "kyma-system", name, nil)
	if err := skr.Get(ctx, client.ObjectKeyFromObject(u), u); err != nil {
		t.Fatal(err)
	}
	u.Object["spec"] = spec
	if err := skr.Update(ctx, u); err != nil {
		t.Fatal(err)
	}
}

func sync(t *testing.T, m *mirror.Mirror, skr client.Client) mirror.Result {
	t.Helper()
	res, err := m.Sync(ctx, skr, fakeKyma)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// TestFakeMirrorLifecycle: a Module CR is mirrored trimmed, with labels,
// owner and a Ready status; a pass that finds nothing new writes nothing;
// a spec change is an update; a second CR of the kind makes the oldest
// mirrored with Warning; a CR that goes (or a kind the runtime stops
// serving) takes its ModuleConfig with it.
func TestFakeMirrorLifecycle(t *testing.T) {
	sl := moduleCRAt("Serverless", "default", 0, map[string]any{"replicas": int64(2)})
	sl.SetLabels(map[string]string{"team": "serverless"})
	sl.SetAnnotations(map[string]string{"not": "mirrored"})
	sl.Object["status"] = map[string]any{"state": "Ready"}
	kcp, skr := fakes(t, sl, moduleCRAt("Keda", "default", 0, map[string]any{"logging": "debug"}))
	m := fakeMirror(kcp, serverless, mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "kedas"}, Module: "keda-module"}, absentCRD)

	if res := sync(t, m, skr); res != (mirror.Result{Created: 2}) {
		t.Fatalf("first pass: %+v, want 2 created", res)
	}
	if n := kcp.Count(fakecluster.Create, "ModuleConfig"); n != 2 {
		t.Errorf("%d ModuleConfigs created, want 2", n)
	}
	mc := getMC(t, kcp, "serverless")
	want := map[string]any{
		"apiVersion": "operator.kyma-project.io/v1alpha1", "kind": "Serverless",
		"metadata": map[string]any{"name": "default", "namespace": "kyma-system", "generation": float64(1), "labels": map[string]any{"team": "serverless"}},
		"spec":     map[string]any{"replicas": float64(2)},
	}
	if got := mirrored(t, mc); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("mirrored resource\n got %v\nwant %v", got, want)
	}
	if mc.Spec.Kyma != fakeKyma.Name || mc.Spec.Module != "serverless" {
		t.Errorf("spec %+v", mc.Spec)
	}
	if mc.Labels[mirror.LabelKymaName] != fakeKyma.Name || mc.Labels[mirror.LabelModuleName] != "serverless" ||
		mc.Labels[contract.LabelRuntimeID] != fakeKyma.RuntimeID || mc.Labels[mirror.LabelManagedBy] != mirror.ManagedBy {
		t.Errorf("labels %v", mc.Labels)
	}
	if len(mc.OwnerReferences) != 1 || mc.OwnerReferences[0].UID != fakeKyma.UID || mc.OwnerReferences[0].Kind != "Kyma" {
		t.Errorf("owner references %+v", mc.OwnerReferences)
	}
	cond := meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored)
	if mc.Status.State != v1alpha1.StateReady || cond == nil || cond.Status != metav1.ConditionTrue || cond.Message != "mirrors kyma-system/default" ||
		mc.Status.LastOperation == nil || mc.Status.LastOperation.Operation != "mirrored kyma-system/default generation 1" ||
		!mc.Status.LastOperation.LastUpdateTime.Equal(&clock) {
		t.Errorf("status %+v", mc.Status)
	}
	if mc := getMC(t, kcp, "keda-module"); mc.Spec.Module != "keda-module" || mirrored(t, mc)["kind"] != "Keda" {
		t.Errorf("the module name is the configured one: %+v", mc.Spec)
	}

	// A pass with nothing new writes nothing, in the KCP or the runtime.
	endKCP, endSKR := kcp.ExpectNoWrites(t), skr.ExpectNoWrites(t)
	if res := sync(t, m, skr); res != (mirror.Result{Unchanged: 2}) {
		t.Errorf("second pass: %+v, want 2 unchanged", res)
	}
	endKCP()
	endSKR()

	setSpec(t, skr, "Serverless", "default", map[string]any{"replicas": int64(3)})
	if res := sync(t, m, skr); res != (mirror.Result{Updated: 1, Unchanged: 1}) {
		t.Errorf("after a spec change: %+v, want 1 updated", res)
	}
	if got := mirrored(t, getMC(t, kcp, "serverless"))["spec"]; fmt.Sprint(got) != "map[replicas:3]" {
		t.Errorf("spec after the change %v", got)
	}

	// A hand edit of a ModuleConfig's labels or owner is put back.
	mc = getMC(t, kcp, "serverless")
	mc.Labels[mirror.LabelModuleName] = "serverless" // kept: the module is found by it
	delete(mc.Labels, contract.LabelRuntimeID)
	mc.OwnerReferences[0].UID = "uid-someone-else"
	if err := kcp.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if res := sync(t, m, skr); res.Updated != 1 {
		t.Errorf("after a label edit: %+v, want 1 updated", res)
	}
	if mc := getMC(t, kcp, "serverless"); mc.Labels[contract.LabelRuntimeID] != fakeKyma.RuntimeID || mc.OwnerReferences[0].UID != fakeKyma.UID {
		t.Errorf("label or owner not put back: %v, %+v", mc.Labels, mc.OwnerReferences)
	}
	mc = getMC(t, kcp, "serverless")
	mc.OwnerReferences[0].UID = "uid-someone-else"
	if err := kcp.Update(ctx, mc); err != nil {
		t.Fatal(err)
	}
	if res := sync(t, m, skr); res.Updated != 1 || getMC(t, kcp, "serverless").OwnerReferences[0].UID != fakeKyma.UID {
		t.Errorf("after an owner edit: %+v, want the owner put back", res)
	}

	// A second, younger Serverless: the oldest stays mirrored, Warning.
	if err := skr.Create(ctx, moduleCRAt("Serverless", "younger", 5, map[string]any{"replicas": int64(9)})); err != nil {
		t.Fatal(err)
	}
	if res := sync(t, m, skr); res.Updated != 1 {
		t.Errorf("with two Serverless CRs: %+v, want 1 updated (status)", res)
	}
	mc = getMC(t, kcp, "serverless")
	cond = meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored)
	if mc.Status.State != v1alpha1.StateWarning || cond == nil || cond.Reason != "MultipleModuleCRs" ||
		!strings.Contains(cond.Message, "oldest Module CR kyma-system/default; ignored: kyma-system/younger") {
		t.Errorf("two Module CRs: state %s, condition %+v", mc.Status.State, cond)
	}
	if got := mirrored(t, mc)["spec"]; fmt.Sprint(got) != "map[replicas:3]" {
		t.Errorf("the younger CR was mirrored: %v", got)
	}

	// The Keda CR goes: so does its ModuleConfig; Serverless stays.
	if err := skr.Delete(ctx, moduleCRAt("Keda", "default", 0, nil)); err != nil {
		t.Fatal(err)
	}
	if res := sync(t, m, skr); res.Deleted != 1 {
		t.Errorf("after the Keda CR went: %+v, want 1 deleted", res)
	}
	if !mcAbsent(t, kcp, "keda-module") || mcAbsent(t, kcp, "serverless") {
		t.Error("want the Keda ModuleConfig gone and the Serverless one kept")
	}

	// A runtime that no longer serves the kind: no Module CRs of it.
	gone := fakecluster.New(t, clientgoscheme.Scheme)
	if res := sync(t, m, gone); res.Deleted != 1 || !mcAbsent(t, kcp, "serverless") {
		t.Errorf("kind not served: %+v, want the ModuleConfig deleted", res)
	}
}

// TestFakeMirrorFailures: a runtime that cannot be listed keeps its
// ModuleConfig and fails the pass after doing the rest; a resource without
// a module name deletes nothing; the KCP's refusals are errors.
func TestFakeMirrorFailures(t *testing.T) {
	kcp, skr := fakes(t, moduleCRAt("Serverless", "default", 0, map[string]any{"a": "b"}), moduleCRAt("Keda", "default", 0, nil))
	keda := mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "kedas"}, Module: "keda"}
	m := fakeMirror(kcp, serverless, keda)
	if res := sync(t, m, skr); res.Created != 2 {
		t.Fatalf("first pass %+v", res)
	}

	// Serverless cannot be listed: its ModuleConfig stays, Keda's pass runs.
	skr.Fail(fakecluster.List, "Serverless", "", fakecluster.ErrUnreachable, 1)
	if err := skr.Delete(ctx, moduleCRAt("Keda", "default", 0, nil)); err != nil {
		t.Fatal(err)
	}
	res, err := m.Sync(ctx, skr, fakeKyma)
	if err == nil || !strings.Contains(err.Error(), "list operator.kyma-project.io/v1alpha1, Resource=serverlesses") {
		t.Errorf("a list that fails: error %v", err)
	}
	if res.Deleted != 1 || mcAbsent(t, kcp, "serverless") || !mcAbsent(t, kcp, "keda") {
		t.Errorf("%+v: want Serverless's ModuleConfig kept and Keda's deleted", res)
	}

	// No module name: an error, and nothing is deleted (the Serverless CR
	// is gone, but the pass cannot tell which ModuleConfig is whose).
	if err := skr.Delete(ctx, moduleCRAt("Serverless", "default", 0, nil)); err != nil {
		t.Fatal(err)
	}
	noName := fakeMirror(kcp, mirror.ModuleResource{GroupVersionResource: keda.GroupVersionResource})
	if res, err := noName.Sync(ctx, skr, fakeKyma); err == nil || !strings.Contains(err.Error(), "no module name configured") || res.Deleted != 0 {
		t.Errorf("no module name: %+v, %v", res, err)
	}
	if mcAbsent(t, kcp, "serverless") {
		t.Error("a resource without a module name deleted a ModuleConfig")
	}

	// The KCP refuses to delete, create, update and write status.
	kcp.Fail(fakecluster.Delete, "ModuleConfig", "", apierrors.NewForbidden(schema.GroupResource{Resource: "moduleconfigs"}, "x", errors.New("no")), 1)
	if _, err := m.Sync(ctx, skr, fakeKyma); err == nil || !strings.Contains(err.Error(), "delete ModuleConfig kyma-a-serverless") {
		t.Errorf("delete refused: %v", err)
	}
	if err := skr.Create(ctx, moduleCRAt("Keda", "default", 0, nil)); err != nil {
		t.Fatal(err)
	}
	kcp.Fail(fakecluster.Create, "ModuleConfig", "", fakecluster.Conflict("moduleconfigs", "kyma-a-keda"), 1)
	if _, err := m.Sync(ctx, skr, fakeKyma); !apierrors.IsConflict(err) || !strings.Contains(fmt.Sprint(err), "create ModuleConfig kyma-a-keda") {
		t.Errorf("create refused: %v", err)
	}
	kcp.Fail(fakecluster.StatusUpdate, "ModuleConfig", "", fakecluster.Conflict("moduleconfigs", "kyma-a-keda"), 1)
	res, err = m.Sync(ctx, skr, fakeKyma)
	if err == nil || !strings.Contains(err.Error(), "update status of ModuleConfig kyma-a-keda") || res.Created != 1 {
		t.Errorf("status refused after the create: %+v, %v; want 1 created and the error", res, err)
	}
	if res := sync(t, m, skr); res.Updated != 1 {
		t.Errorf("the next pass writes the status: %+v", res)
	}
	setSpec(t, skr, "Keda", "default", map[string]any{"x": "y"})
	kcp.Fail(fakecluster.Update, "ModuleConfig", "", fakecluster.Conflict("moduleconfigs", "kyma-a-keda"), 1)
	if _, err := m.Sync(ctx, skr, fakeKyma); err == nil || !strings.Contains(err.Error(), "update ModuleConfig kyma-a-keda") {
		t.Errorf("update refused: %v", err)
	}
	kcp.Fail(fakecluster.List, "ModuleConfig", "", fakecluster.ErrUnreachable, 1)
	if _, err := m.Sync(ctx, skr, fakeKyma); err == nil || !strings.Contains(err.Error(), "list ModuleConfigs") {
		t.Errorf("KCP list refused: %v", err)
	}
}

// TestFakeMirrorBounds: over MaxModuleCRs Module CRs, or one over
// MaxResourceBytes, is not mirrored: an existing ModuleConfig keeps its
// spec and gets state Error with reason TooMany or TooLarge; without one
// nothing is created.
func TestFakeMirrorBounds(t *testing.T) {
	kcp, skr := fakes(t, moduleCRAt("Serverless", "default", 0, map[string]any{"small": true}))
	m := fakeMirror(kcp, serverless)
	if res := sync(t, m, skr); res.Created != 1 {
		t.Fatalf("first pass %+v", res)
	}
	setSpec(t, skr, "Serverless", "default", map[string]any{"blob": strings.Repeat("x", mirror.MaxResourceBytes)})
	if res := sync(t, m, skr); res.Updated != 1 {
		t.Errorf("too large: %+v, want the status updated", res)
	}
	mc := getMC(t, kcp, "serverless")
	cond := meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored)
	if mc.Status.State != v1alpha1.StateError || cond == nil || cond.Reason != "TooLarge" || cond.Status != metav1.ConditionFalse {
		t.Errorf("too large: state %s, condition %+v", mc.Status.State, cond)
	}
	if got := mirrored(t, mc)["spec"]; fmt.Sprint(got) != "map[small:true]" {
		t.Errorf("too large: the spec changed to %.40v", got)
	}

	for i := range mirror.MaxModuleCRs {
		if err := skr.Create(ctx, moduleCRAt("Serverless", fmt.Sprintf("cr-%03d", i), i+1, nil)); err != nil {
			t.Fatal(err)
		}
	}
	if res := sync(t, m, skr); res.Updated != 1 {
		t.Errorf("too many: %+v, want the status updated", res)
	}
	mc = getMC(t, kcp, "serverless")
	if cond := meta.FindStatusCondition(mc.Status.Conditions, mirror.ConditionMirrored); cond == nil || cond.Reason != "TooMany" ||
		mc.Status.LastOperation == nil || !strings.Contains(mc.Status.LastOperation.Operation, "more than 100 Module CRs") {
		t.Errorf("too many: condition %+v, last operation %+v", cond, mc.Status.LastOperation)
	}

	// Without a ModuleConfig, a refused runtime gets none.
	if n, err := m.Remove(ctx, fakeKyma); err != nil || n != 1 {
		t.Fatalf("Remove: %d, %v", n, err)
	}
	if res := sync(t, m, skr); res != (mirror.Result{Unchanged: 1}) || !mcAbsent(t, kcp, "serverless") {
		t.Errorf("too many, no ModuleConfig: %+v; want none created", res)
	}
}

// TestFakeMirrorRemove deletes the ModuleConfigs of one Kyma only.
func TestFakeMirrorRemove(t *testing.T) {
	kcp, skr := fakes(t, moduleCRAt("Serverless", "default", 0, nil))
	m := fakeMirror(kcp, serverless)
	other := fakeKyma
	other.Name, other.UID = "kyma-b", "uid-kyma-b"
	for _, k := range []mirror.Kyma{fakeKyma, other} {
		if _, err := m.Sync(ctx, skr, k); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := m.Remove(ctx, fakeKyma); err != nil || n != 1 {
		t.Fatalf("Remove: %d, %v; want 1", n, err)
	}
	list := &v1alpha1.ModuleConfigList{}
	if err := kcp.List(ctx, list); err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 || list.Items[0].Spec.Kyma != "kyma-b" {
		t.Errorf("left: %+v; want only kyma-b's", list.Items)
	}
	kcp.Fail(fakecluster.Delete, "ModuleConfig", "", fakecluster.ErrUnreachable, 1)
	if n, err := m.Remove(ctx, other); err == nil || n != 0 {
		t.Errorf("a failed delete: %d, %v", n, err)
	}
	kcp.Fail(fakecluster.List, "ModuleConfig", "", fakecluster.ErrUnreachable, 1)
	if _, err := m.Remove(ctx, other); err == nil {
		t.Error("a failed list: no error")
	}
}
