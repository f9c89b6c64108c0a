package diffapply_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

func decode(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSubset(t *testing.T) {
	for _, tc := range []struct {
		name       string
		want, have string
		ok         bool
	}{
		{"equal", `{"a":1,"b":"x"}`, `{"a":1,"b":"x"}`, true},
		{"extra keys in live are ignored", `{"a":1}`, `{"a":1,"defaulted":"y"}`, true},
		{"missing key", `{"a":1,"b":2}`, `{"a":1}`, false},
		{"changed scalar", `{"a":1}`, `{"a":2}`, false},
		{"changed type", `{"a":"1"}`, `{"a":1}`, false},
		{"nested map", `{"m":{"x":[1,2]}}`, `{"m":{"x":[1,2],"y":3}}`, true},
		{"list element with defaults", `{"l":[{"n":"a"}]}`, `{"l":[{"n":"a","d":true}]}`, true},
		{"list longer in live", `{"l":[1]}`, `{"l":[1,2]}`, false},
		{"list shorter in live", `{"l":[1,2]}`, `{"l":[1]}`, false},
		{"list order matters", `{"l":[1,2]}`, `{"l":[2,1]}`, false},
		{"null in want matches absent", `{"a":null}`, `{}`, true},
		{"empty map in want matches absent", `{"a":{}}`, `{}`, true},
		{"map where list is", `{"a":{}}`, `{"a":[]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := diffapply.Subset(decode(t, tc.want), decode(t, tc.have)); got != tc.ok {
				t.Fatalf("Subset(%s, %s) = %v, want %v", tc.want, tc.have, got, tc.ok)
			}
		})
	}
}

func secret(data string) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns", Labels: map[string]string{"l": "v"}},
		Data:       map[string][]byte{"k": []byte(data)},
	}
}

var secretGVK = corev1.SchemeGroupVersion.WithKind("Secret")

func TestDesired(t *testing.T) {
	d, err := diffapply.Desired(secret("x"), secretGVK)
	if err != nil {
		t.Fatal(err)
	}
	if d.GetAPIVersion() != "v1" || d.GetKind() != "Secret" {
		t.Fatalf("apiVersion/kind = %s/%s", d.GetAPIVersion(), d.GetKind())
	}
	meta := d.Object["metadata"].(map[string]any)
	if _, ok := meta["creationTimestamp"]; ok {
		t.Fatal("creationTimestamp kept")
	}
	if _, ok := d.Object["status"]; ok {
		t.Fatal("status kept")
	}
	h1 := d.GetAnnotations()[diffapply.HashAnnotation]
	if h1 == "" {
		t.Fatal("no hash annotation")
	}
	again, _ := diffapply.Desired(secret("x"), secretGVK)
	if h := again.GetAnnotations()[diffapply.HashAnnotation]; h != h1 {
		t.Fatalf("hash not stable: %s vs %s", h, h1)
	}
	other, _ := diffapply.Desired(secret("y"), secretGVK)
	if h := other.GetAnnotations()[diffapply.HashAnnotation]; h == h1 {
		t.Fatal("hash did not change with the content")
	}
	// A live object carrying an old hash annotation does not change the hash.
	withOld := secret("x")
	withOld.Annotations = map[string]string{diffapply.HashAnnotation: "stale"}
	w, _ := diffapply.Desired(withOld, secretGVK)
	if h := w.GetAnnotations()[diffapply.HashAnnotation]; h != h1 {
		t.Fatalf("hash depends on a previous hash annotation: %s vs %s", h, h1)
	}
}

// live simulates what the API server returns after applying desired: the
// same values plus server-side fields.
func live(t *testing.T, desired runtime.Object, edit func(*corev1.Secret)) *corev1.Secret {
	t.Helper()
	raw, _ := json.Marshal(desired)
	s := &corev1.Secret{}
	if err := json.Unmarshal(raw, s); err != nil {
		t.Fatal(err)
	}
	s.UID, s.ResourceVersion, s.Type = "uid", "7", corev1.SecretTypeOpaque
	if edit != nil {
		edit(s)
	}
	return s
}

type recorder struct {
	applied, updated int
	err              error
}

func (r *recorder) Apply(_ context.Context, _ runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	r.applied++
	return r.err
}

func (r *recorder) Update(context.Context, client.Object, ...client.UpdateOption) error {
	r.updated++
	return r.err
}

func TestEnsure(t *testing.T) {
	desired, err := diffapply.Desired(secret("x"), secretGVK)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		live  runtime.Object
		write bool
	}{
		{"absent", nil, true},
		{"typed nil", (*corev1.Secret)(nil), true},
		{"up to date", live(t, desired, nil), false},
		{"extra label from someone else", live(t, desired, func(s *corev1.Secret) { s.Labels["other"] = "x" }), false},
		{"hand-edited value", live(t, desired, func(s *corev1.Secret) { s.Data["k"] = []byte("edited") }), true},
		{"our label removed", live(t, desired, func(s *corev1.Secret) { delete(s.Labels, "l") }), true},
		{"applied by an older version of us", live(t, desired, func(s *corev1.Secret) { s.Annotations[diffapply.HashAnnotation] = "old" }), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &recorder{}
			wrote, err := diffapply.Ensure(context.Background(), rec, "me", desired, tc.live)
			if err != nil {
				t.Fatal(err)
			}
			if wrote != tc.write || (rec.applied == 1) != tc.write {
				t.Fatalf("wrote=%v applied=%d, want write=%v", wrote, rec.applied, tc.write)
			}
		})
	}
	rec := &recorder{err: errors.New("boom")}
	if _, err := diffapply.Ensure(context.Background(), rec, "me", desired, nil); err == nil {
		t.Fatal("apply error not returned")
	}
}

// keeper answers an apply as the API server does when another field manager
// co-owns a list item the applied object leaves out: the item stays.
type keeper struct {
	kept     []any
	replaced *unstructured.Unstructured
}

func (k *keeper) Apply(_ context.Context, obj runtime.ApplyConfiguration, _ ...client.ApplyOption) error {
	// ApplyConfigurationFromUnstructured wraps the object: the answer is
	// written into it.
	o := obj.(interface {
		UnstructuredContent() map[string]any
		SetResourceVersion(string)
	})
	items, _, _ := unstructured.NestedSlice(o.UnstructuredContent(), "webhooks")
	if err := unstructured.SetNestedSlice(o.UnstructuredContent(), append(items, k.kept...), "webhooks"); err != nil {
		return err
	}
	o.SetResourceVersion("2")
	return nil
}

func (k *keeper) Update(_ context.Context, obj client.Object, _ ...client.UpdateOption) error {
	k.replaced = obj.(*unstructured.Unstructured).DeepCopy()
	obj.SetResourceVersion("3")
	return nil
}

// TestApplyReplacesWhatApplyKeeps: an apply whose answer still holds a list
// item desired left out is followed by a replacement at the answered
// resourceVersion; an answer that holds desired is not.
func TestApplyReplacesWhatApplyKeeps(t *testing.T) {
	vwc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
		"metadata": map[string]any{"name": "skr-webhook"},
		"webhooks": []any{map[string]any{"name": "kept.example.com"}},
	}}
	desired, err := diffapply.Desired(vwc, vwc.GroupVersionKind())
	if err != nil {
		t.Fatal(err)
	}
	k := &keeper{}
	if rv, err := diffapply.Apply(context.Background(), k, "me", desired); err != nil || rv != "2" || k.replaced != nil {
		t.Fatalf("nothing kept: rv %q, err %v, replaced %v", rv, err, k.replaced)
	}
	k = &keeper{kept: []any{map[string]any{"name": "deleted-watcher.example.com"}}}
	rv, err := diffapply.Apply(context.Background(), k, "me", desired)
	if err != nil || rv != "3" || k.replaced == nil {
		t.Fatalf("an item kept: rv %q, err %v, replaced %v", rv, err, k.replaced)
	}
	if k.replaced.GetResourceVersion() != "2" {
		t.Errorf("replaced at resourceVersion %q, want the answered 2", k.replaced.GetResourceVersion())
	}
	if hooks, _, _ := unstructured.NestedSlice(k.replaced.Object, "webhooks"); len(hooks) != 1 {
		t.Errorf("replacement holds %d webhooks, want desired's 1", len(hooks))
	}
}

// The subset comparison ignores what the API server adds and sees what
// someone changed.
func ExampleSubset() {
	desired := map[string]any{"spec": map[string]any{"replicas": 1.0}}
	defaulted := map[string]any{"spec": map[string]any{"replicas": 1.0, "revisionHistoryLimit": 10.0}}
	edited := map[string]any{"spec": map[string]any{"replicas": 3.0}}
	fmt.Println(diffapply.Subset(desired, defaulted), diffapply.Subset(desired, edited))
	// Output: true false
}

func TestSubsetNumbers(t *testing.T) {
	for _, tc := range []struct {
		want, have any
		ok         bool
	}{
		{float64(443), int64(443), true},
		{float64(443), int64(444), false},
		{int64(3), float64(3), true},
		{float64(1), "1", false},
		{float64(1), json.Number("1"), true},
	} {
		if got := diffapply.Subset(tc.want, tc.have); got != tc.ok {
			t.Errorf("Subset(%#v, %#v) = %v, want %v", tc.want, tc.have, got, tc.ok)
		}
	}
}

func TestUpToDateUnstructuredLive(t *testing.T) {
	desired, err := diffapply.Desired(&corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "ns"},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "https", Port: 443, TargetPort: intstr.FromInt32(443)}}},
	}, corev1.SchemeGroupVersion.WithKind("Service"))
	if err != nil {
		t.Fatal(err)
	}
	// As a client decodes it: numbers are int64, defaults are added.
	live := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Service",
		"metadata": map[string]any{"name": "s", "namespace": "ns", "resourceVersion": "9",
			"annotations": map[string]any{diffapply.HashAnnotation: desired.GetAnnotations()[diffapply.HashAnnotation]}},
		"spec": map[string]any{"clusterIP": "10.0.0.1", "ports": []any{
			map[string]any{"name": "https", "port": int64(443), "protocol": "TCP", "targetPort": int64(443)}}},
	}}
	if ok, err := diffapply.UpToDate(desired, live); err != nil || !ok {
		t.Fatalf("UpToDate = %v, %v", ok, err)
	}
	if err := unstructured.SetNestedSlice(live.Object, []any{map[string]any{"name": "https", "port": int64(8443)}}, "spec", "ports"); err != nil {
		t.Fatal(err)
	}
	if ok, _ := diffapply.UpToDate(desired, live); ok {
		t.Fatal("edited port not seen")
	}
}

func TestMemo(t *testing.T) {
	var m diffapply.Memo
	if m.Known("k", "1", "h") {
		t.Fatal("empty memo knows")
	}
	m.Record("rt1|Secret|ns/s", "1", "h")
	m.Record("rt2|Secret|ns/s", "5", "h")
	for _, tc := range []struct {
		key, rv, hash string
		ok            bool
	}{
		{"rt1|Secret|ns/s", "1", "h", true},
		{"rt1|Secret|ns/s", "2", "h", false},  // changed since
		{"rt1|Secret|ns/s", "1", "h2", false}, // intent changed
		{"rt1|Secret|ns/s", "", "h", false},
	} {
		if got := m.Known(tc.key, tc.rv, tc.hash); got != tc.ok {
			t.Errorf("Known(%q, %q, %q) = %v", tc.key, tc.rv, tc.hash, got)
		}
	}
	m.ForgetPrefix("rt1|")
	if m.Known("rt1|Secret|ns/s", "1", "h") || !m.Known("rt2|Secret|ns/s", "5", "h") {
		t.Fatal("ForgetPrefix")
	}
}
