package memskr_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/memskr"
)

func newFleet(t *testing.T) *memskr.Fleet {
	t.Helper()
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	m := meta.NewDefaultRESTMapper(nil)
	m.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	m.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
	return memskr.NewFleet(s, m)
}

func obj(kind, ns, name string, data map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": kind}}
	u.SetNamespace(ns)
	u.SetName(name)
	u.SetAnnotations(map[string]string{"hash": "1"})
	if data != nil {
		u.Object["data"] = data
	}
	return u
}

// apply applies u as vs-controller does and returns the resourceVersion
// answered.
func apply(t *testing.T, c client.Client, u *unstructured.Unstructured, opts ...client.ApplyOption) (string, error) {
	t.Helper()
	u = u.DeepCopy()
	if opts == nil {
		opts = []client.ApplyOption{client.FieldOwner("vs-controller"), client.ForceOwnership}
	}
	err := c.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), opts...)
	return u.GetResourceVersion(), err
}

func TestApplyLikeAnAPIServer(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	c := f.Cluster("kcp-system/runtime-1")
	cm := obj("ConfigMap", "kyma-system", "skr-webhook-managers", map[string]any{"a": "1"})

	if _, err := apply(t, c, cm); !apierrors.IsNotFound(err) {
		t.Fatalf("apply into a missing namespace: %v, want NotFound", err)
	}
	if _, err := apply(t, c, obj("Namespace", "", "kyma-system", nil)); err != nil {
		t.Fatal(err)
	}
	if _, err := apply(t, c, cm, client.ForceOwnership); !apierrors.IsBadRequest(err) {
		t.Fatalf("apply without a field manager: %v, want BadRequest", err)
	}
	rv1, err := apply(t, c, cm)
	if err != nil || rv1 == "" {
		t.Fatalf("apply: rv %q, %v", rv1, err)
	}
	if rv, err := apply(t, c, cm); err != nil || rv != rv1 {
		t.Fatalf("unchanged apply: rv %q (was %q), %v; want no write", rv, rv1, err)
	}
	changed := obj("ConfigMap", "kyma-system", "skr-webhook-managers", map[string]any{"a": "2"})
	rv2, err := apply(t, c, changed)
	if err != nil || rv2 == rv1 {
		t.Fatalf("changed apply: rv %q (was %q), %v", rv2, rv1, err)
	}
	if _, err := apply(t, c, cm, client.FieldOwner("someone-else")); !apierrors.IsConflict(err) {
		t.Fatalf("another manager without force: %v, want Conflict", err)
	}

	// Reads: metadata only, unstructured, typed.
	pm := &metav1.PartialObjectMetadata{}
	pm.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := c.Get(ctx, client.ObjectKey{Namespace: "kyma-system", Name: "skr-webhook-managers"}, pm); err != nil {
		t.Fatal(err)
	}
	if pm.ResourceVersion != rv2 || pm.Generation != 2 || pm.UID == "" || pm.Annotations["hash"] != "1" {
		t.Fatalf("metadata: %+v", pm.ObjectMeta)
	}
	typed := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pm), typed); err != nil || typed.Data["a"] != "2" {
		t.Fatalf("typed get: %v %v", typed.Data, err)
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("ConfigMap"))
	if err := c.Get(ctx, client.ObjectKeyFromObject(pm), u); err != nil || u.Object["data"].(map[string]any)["a"] != "2" {
		t.Fatalf("unstructured get: %v %v", u.Object, err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "other", Name: "x"}, u); !apierrors.IsNotFound(err) {
		t.Fatalf("missing object: %v, want NotFound", err)
	}
	var list corev1.ConfigMapList
	if err := c.List(ctx, &list, client.InNamespace("kyma-system")); err != nil || len(list.Items) != 1 {
		t.Fatalf("list: %d items, %v", len(list.Items), err)
	}
	if err := c.List(ctx, &list, client.MatchingLabels{"a": "b"}); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("list with a selector: %v, want unsupported", err)
	}

	// Delete with preconditions.
	wrong := types.UID("not-it")
	if err := c.Delete(ctx, typed, client.Preconditions{UID: &wrong}); !apierrors.IsConflict(err) {
		t.Fatalf("delete with another UID: %v, want Conflict", err)
	}
	if err := c.Delete(ctx, typed, client.Preconditions{UID: &pm.UID}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(pm), pm); !apierrors.IsNotFound(err) {
		t.Fatalf("after delete: %v, want NotFound", err)
	}
	if err := c.Patch(ctx, typed, client.Merge); !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("patch: %v, want unsupported", err)
	}
}

func TestClustersAreSeparateAndShareBodies(t *testing.T) {
	ctx := context.Background()
	f := newFleet(t)
	for _, name := range []string{"a", "b", "c"} {
		c := f.Cluster(name)
		if _, err := apply(t, c, obj("Namespace", "", "kyma-system", nil)); err != nil {
			t.Fatal(err)
		}
		if _, err := apply(t, c, obj("ConfigMap", "kyma-system", "same", map[string]any{"k": "v"})); err != nil {
			t.Fatal(err)
		}
		if _, err := apply(t, c, obj("ConfigMap", "kyma-system", "own", map[string]any{"k": name})); err != nil {
			t.Fatal(err)
		}
	}
	// One Namespace body, one "same" body, three "own" bodies.
	if n := f.Bodies(); n != 5 {
		t.Fatalf("%d bodies stored, want 5", n)
	}
	cm := &corev1.ConfigMap{}
	if err := f.Cluster("b").Get(ctx, client.ObjectKey{Namespace: "kyma-system", Name: "own"}, cm); err != nil || cm.Data["k"] != "b" {
		t.Fatalf("cluster b's own ConfigMap: %v %v", cm.Data, err)
	}
	// A deleted namespace takes its objects; unused bodies go.
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kyma-system"}}
	if err := f.Cluster("c").Delete(ctx, ns); err != nil {
		t.Fatal(err)
	}
	if err := f.Cluster("c").Get(ctx, client.ObjectKey{Namespace: "kyma-system", Name: "own"}, cm); !apierrors.IsNotFound(err) {
		t.Fatalf("after its namespace went: %v, want NotFound", err)
	}
	if n := f.Bodies(); n != 4 {
		t.Fatalf("%d bodies stored after deleting c's namespace, want 4", n)
	}
}
