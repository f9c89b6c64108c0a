package fakecluster_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
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

// recorder is a testing.TB that keeps what Errorf reports instead of
// failing the test (the rest is the real test's: Cleanup, Helper).
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}

// TestExpectNoWrites: while the cluster is strict every write of every
// verb — also through a client Runtimes hands out — fails the test naming
// the verb, kind and key, and is refused (an error, the object as it was,
// no record); reads, dry runs and allowed writes pass; after end (or the
// test's end) writes are accepted again.
func TestExpectNoWrites(t *testing.T) {
	widget := schema.GroupVersionKind{Group: "example.com", Version: "v1", Kind: "Widget"}
	kyma := fakecluster.Kyma("kcp-system", "k", "", "")
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		t.Fatal(err)
	}
	fakecluster.AddKyma(s)
	c := fakecluster.New(t, s, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{widget: false}),
		fakecluster.WithObjects(cm("a"), cm("b"), kyma))
	rts := &fakecluster.Runtimes{}
	rts.Add("rt", c)
	viaRuntimes, err := rts.For(ctx, "rt", []byte("kubeconfig"))
	if err != nil {
		t.Fatal(err)
	}

	rec := &recorder{TB: t}
	end := c.ExpectNoWrites(rec, fakecluster.Write{Verb: fakecluster.Update, Kind: "ConfigMap", Name: "b"})
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "a"}, &corev1.ConfigMap{}); err != nil {
		t.Errorf("a read while strict: %v", err)
	}
	if err := c.List(ctx, &corev1.ConfigMapList{}); err != nil {
		t.Errorf("a list while strict: %v", err)
	}
	if err := c.Create(ctx, cm("dry"), client.DryRunAll); err != nil {
		t.Errorf("a dry run while strict: %v", err)
	}
	b := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "b"}, b); err != nil {
		t.Fatal(err)
	}
	b.Data = map[string]string{"allowed": "yes"}
	if err := c.Update(ctx, b); err != nil {
		t.Errorf("an allowed update: %v", err)
	}
	if len(rec.errs) != 0 {
		t.Fatalf("reads, a dry run and an allowed write failed the test: %q", rec.errs)
	}

	changed := cm("a")
	changed.Data = map[string]string{"k": "v"}
	np := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"podSelector": map[string]any{}}}}
	np.SetGroupVersionKind(networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy"))
	np.SetNamespace("default")
	np.SetName("np")
	status := kyma.DeepCopy()
	status.Object["status"] = map[string]any{"state": "Ready"}
	statusAC := client.ApplyConfigurationFromUnstructured(status.DeepCopy())
	for _, tc := range []struct {
		write func() error
		want  string
	}{
		{func() error { return c.Create(ctx, cm("new")) }, "unexpected create of v1 ConfigMap default/new "},
		{func() error { return c.Update(ctx, changed) }, "unexpected update of v1 ConfigMap default/a "},
		{func() error { return c.Patch(ctx, changed, client.Merge) }, "unexpected patch of v1 ConfigMap default/a "},
		{func() error {
			return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(np), client.FieldOwner("test"))
		}, "unexpected apply of networking.k8s.io/v1 NetworkPolicy default/np "},
		{func() error { return c.Delete(ctx, cm("a")) }, "unexpected delete of v1 ConfigMap default/a "},
		{func() error { return c.DeleteAllOf(ctx, &corev1.ConfigMap{}, client.InNamespace("default")) }, "unexpected deleteallof of v1 ConfigMap default/* "},
		{func() error { return c.Status().Update(ctx, status) }, "unexpected status-update of operator.kyma-project.io/v1beta2 Kyma kcp-system/k "},
		{func() error { return c.Status().Patch(ctx, status, client.Merge) }, "unexpected status-patch of operator.kyma-project.io/v1beta2 Kyma kcp-system/k "},
		{func() error { return c.Status().Apply(ctx, statusAC, client.FieldOwner("test")) }, "unexpected status-apply of operator.kyma-project.io/v1beta2 Kyma kcp-system/k "},
		{func() error {
			return c.SubResource("eviction").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "p"}}, &corev1.Pod{})
		}, "unexpected subresource-create of v1 Pod default/p "},
		{func() error { return viaRuntimes.Create(ctx, cm("skr")) }, "unexpected create of v1 ConfigMap default/skr "},
		{func() error { return c.Update(ctx, b) }, ""}, // allowed, still
	} {
		rec.errs = nil
		err := tc.write()
		if tc.want == "" {
			if err != nil || len(rec.errs) != 0 {
				t.Errorf("an allowed write: %v, reported %q", err, rec.errs)
			}
			continue
		}
		if !errors.Is(err, fakecluster.ErrUnexpectedWrite) {
			t.Errorf("%s: the write returned %v, want ErrUnexpectedWrite", tc.want, err)
		}
		if len(rec.errs) != 1 || !strings.Contains(rec.errs[0], tc.want) {
			t.Errorf("reported %q, want one report of %q", rec.errs, tc.want)
		}
	}
	got := &corev1.ConfigMap{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "a"}, got); err != nil || got.Data != nil {
		t.Errorf("a refused write changed the object: %v, %v", err, got.Data)
	}
	if w := c.Writes(); len(w) != 2 {
		t.Errorf("writes %v, want the two allowed updates only", w)
	}

	end()
	rec.errs = nil
	if err := c.Update(ctx, changed); err != nil || len(rec.errs) != 0 {
		t.Errorf("after end: %v, reported %q", err, rec.errs)
	}
}
