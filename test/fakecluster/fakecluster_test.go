package fakecluster_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

var ctx = context.Background()

func cm(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
}

// TestFaults: a fault answers the calls it matches (verb, kind, name or
// any name), as many times as it was given, in the order faults were
// added; Heal removes them.
func TestFaults(t *testing.T) {
	c := fakecluster.New(t, clientgoscheme.Scheme)
	c.Fail(fakecluster.Create, "ConfigMap", "a", fakecluster.Conflict("configmaps", "a"), 2)
	c.Fail(fakecluster.Create, "ConfigMap", "", fakecluster.ErrUnreachable, 1)
	if err := c.Create(ctx, cm("a")); !apierrors.IsConflict(err) {
		t.Errorf("first create of a: %v, want the conflict", err)
	}
	if err := c.Create(ctx, cm("b")); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("create of b: %v, want the any-name fault", err)
	}
	if err := c.Create(ctx, cm("a")); !apierrors.IsConflict(err) {
		t.Errorf("second create of a: %v, want the conflict", err)
	}
	if err := c.Create(ctx, cm("a")); err != nil {
		t.Errorf("third create of a: %v, want the faults used up", err)
	}
	c.Fail(fakecluster.List, "ConfigMap", "whatever", fakecluster.ErrUnreachable, -1)
	for range 3 {
		if err := c.List(ctx, &corev1.ConfigMapList{}); !errors.Is(err, fakecluster.ErrUnreachable) {
			t.Errorf("list: %v, want the fault every time (a name does not narrow a list)", err)
		}
	}
	c.Heal()
	if err := c.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Errorf("healed: %v", err)
	}
	var status apierrors.APIStatus
	if errors.As(fakecluster.ErrUnreachable, &status) {
		t.Error("ErrUnreachable carries an API status: it must look like a transport error")
	}
}

// TestRecords: accepted writes are recorded in order (dry runs and
// refused writes are not), reads are counted per kind, Reset forgets both.
func TestRecords(t *testing.T) {
	c := fakecluster.New(t, clientgoscheme.Scheme)
	if err := c.Create(ctx, cm("a")); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, cm("dry"), client.DryRunAll); err != nil {
		t.Fatal(err)
	}
	c.Fail(fakecluster.Delete, "ConfigMap", "", fakecluster.ErrUnreachable, 1)
	_ = c.Delete(ctx, cm("a"))
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "a"}, got); err != nil {
		t.Fatal(err)
	}
	got.Data = map[string]string{"k": "v"}
	if err := c.Update(ctx, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Delete(ctx, got); err != nil {
		t.Fatal(err)
	}
	want := []fakecluster.Write{{Verb: fakecluster.Create, Kind: "ConfigMap", Namespace: "default", Name: "a"},
		{Verb: fakecluster.Update, Kind: "ConfigMap", Namespace: "default", Name: "a"}, {Verb: fakecluster.Delete, Kind: "ConfigMap", Namespace: "default", Name: "a"}}
	if w := c.Writes(); len(w) != len(want) || w[0] != want[0] || w[1] != want[1] || w[2] != want[2] {
		t.Errorf("writes %v, want %v", w, want)
	}
	if c.Count(fakecluster.Update, "ConfigMap") != 1 || c.Count("", "") != 3 || c.Reads("ConfigMap") != 1 {
		t.Errorf("counts: %d updates, %d writes, %d reads", c.Count(fakecluster.Update, "ConfigMap"), c.Count("", ""), c.Reads("ConfigMap"))
	}
	c.Reset()
	if len(c.Writes()) != 0 || c.Reads("ConfigMap") != 0 {
		t.Error("Reset kept records")
	}
}

// TestKindsAndApply: declared custom resources map with their scope,
// cluster-scoped kinds are known as such, a kind served later is found,
// and server-side apply of a NetworkPolicy works (the fake client's own
// type converters refuse it).
func TestKindsAndApply(t *testing.T) {
	widget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	c := fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{widget: false}))
	for _, tc := range []struct {
		obj  runtime.Object
		want bool
	}{{&corev1.ConfigMap{}, true}, {&corev1.Namespace{}, false}, {typed(widget), true}} {
		if ns, err := c.IsObjectNamespaced(tc.obj); err != nil || ns != tc.want {
			t.Errorf("%T %v: namespaced %t, %v", tc.obj, tc.obj.GetObjectKind().GroupVersionKind(), ns, err)
		}
	}
	gadget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Gadget"}
	if _, err := c.IsObjectNamespaced(typed(gadget)); err == nil {
		t.Error("an undeclared kind is served")
	}
	c.Serve(gadget, true)
	if ns, err := c.IsObjectNamespaced(typed(gadget)); err != nil || ns {
		t.Errorf("Gadget served later: namespaced %t, %v", ns, err)
	}

	np := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"podSelector": map[string]any{}}}}
	np.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
	np.SetNamespace("default")
	np.SetName("np")
	for range 2 {
		if err := c.Apply(ctx, client.ApplyConfigurationFromUnstructured(np.DeepCopy()), client.FieldOwner("test"), client.ForceOwnership); err != nil {
			t.Fatalf("apply NetworkPolicy: %v", err)
		}
	}
	if c.Count(fakecluster.Apply, "NetworkPolicy") != 2 {
		t.Errorf("writes %v", c.Writes())
	}
}

func typed(gvk schema.GroupVersionKind) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u
}
