package kymastore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
)

func meta(name, label, domain string) *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kcp-system"}}
	if label != "" {
		m.Labels = map[string]string{contract.LabelRuntimeID: label, "team": "x"}
	}
	if domain != "" {
		m.Annotations = map[string]string{contract.AnnotationSKRDomain: domain, "other": "y"}
	}
	return m
}

func lookup(t *testing.T, s *kymastore.Store, id string) (pinning.Runtime, bool, error) {
	t.Helper()
	return s.LookupRuntime(context.Background(), id)
}

// TestStoreEvents: adds, updates (label moved) and deletes keep both
// indexes right, and nothing is answered before the first list.
func TestStoreEvents(t *testing.T) {
	s := kymastore.New()
	if _, _, err := lookup(t, s, "a"); !errors.Is(err, kymastore.ErrNotSynced) {
		t.Fatalf("lookup before sync: %v, want ErrNotSynced", err)
	}
	if err := s.Replace([]any{meta("a", "", "a.example.com"), meta("kyma-b", "b", "b.example.com")}, "1"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Synced():
	default:
		t.Fatal("not synced after Replace")
	}
	check := func(id string, want pinning.Runtime, found, wantErr bool) {
		t.Helper()
		rt, ok, err := lookup(t, s, id)
		if (err != nil) != wantErr || ok != found || rt != want {
			t.Errorf("LookupRuntime(%q) = %+v, %v, %v; want %+v, %v, err=%v", id, rt, ok, err, want, found, wantErr)
		}
	}
	check("a", pinning.Runtime{ID: "a", KymaName: "a", SKRDomain: "a.example.com"}, true, false)
	check("b", pinning.Runtime{ID: "b", KymaName: "kyma-b", SKRDomain: "b.example.com"}, true, false)
	check("kyma-b", pinning.Runtime{}, false, false)

	// A second Kyma labelled b: ambiguous, fail closed.
	if err := s.Add(meta("kyma-b2", "b", "b2.example.com")); err != nil {
		t.Fatal(err)
	}
	check("b", pinning.Runtime{}, false, true)
	// Its label moves to c: b is unambiguous again, c is kyma-b2.
	if err := s.Update(meta("kyma-b2", "c", "c.example.com")); err != nil {
		t.Fatal(err)
	}
	check("b", pinning.Runtime{ID: "b", KymaName: "kyma-b", SKRDomain: "b.example.com"}, true, false)
	check("c", pinning.Runtime{ID: "c", KymaName: "kyma-b2", SKRDomain: "c.example.com"}, true, false)
	// Kyma a gets a label naming another runtime: a is no longer a runtime.
	if err := s.Update(meta("a", "z", "a.example.com")); err != nil {
		t.Fatal(err)
	}
	check("a", pinning.Runtime{}, false, false)
	check("z", pinning.Runtime{ID: "z", KymaName: "a", SKRDomain: "a.example.com"}, true, false)
	// Deletes, also of a last state the reflector no longer knows.
	if err := s.Delete(meta("kyma-b", "b", "")); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete(toolscache.DeletedFinalStateUnknown{Key: "kcp-system/kyma-b2", Obj: meta("kyma-b2", "c", "")}); err != nil {
		t.Fatal(err)
	}
	check("b", pinning.Runtime{}, false, false)
	check("c", pinning.Runtime{}, false, false)
	if n := s.Len(); n != 1 {
		t.Errorf("Len = %d after deletes, want 1", n)
	}
	// A relist replaces everything.
	if err := s.Replace([]any{meta("d", "", "d.example.com")}, "2"); err != nil {
		t.Fatal(err)
	}
	check("z", pinning.Runtime{}, false, false)
	check("d", pinning.Runtime{ID: "d", KymaName: "d", SKRDomain: "d.example.com"}, true, false)
	if err := s.Add(&metav1.Status{}); err == nil {
		t.Error("Add of a non-Kyma object succeeded")
	}
}

// TestTrim: Trim keeps what the lookup and an informer read and drops the
// rest; an empty runtime-id label is dropped (an empty label is no label),
// an empty skr-domain annotation is kept (domain-not-set, not
// unknown-runtime).
func TestTrim(t *testing.T) {
	m := meta("kyma-b", "b", "b.example.com")
	m.APIVersion, m.Kind = "operator.kyma-project.io/v1beta2", "Kyma"
	m.ResourceVersion, m.UID = "7", "uid-7"
	m.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "x"}}
	m.Annotations["kubectl.kubernetes.io/last-applied-configuration"] = "{...}"
	got := trim(t, m)
	if got.Name != "kyma-b" || got.Namespace != "kcp-system" || got.ResourceVersion != "7" || got.UID != "uid-7" ||
		got.Kind != "Kyma" || got.ManagedFields != nil ||
		len(got.Labels) != 1 || got.Labels[contract.LabelRuntimeID] != "b" ||
		len(got.Annotations) != 1 || got.Annotations[contract.AnnotationSKRDomain] != "b.example.com" {
		t.Errorf("Trim = %+v", got)
	}

	empty := meta("kyma-e", "", "")
	empty.Labels = map[string]string{contract.LabelRuntimeID: "", "team": "x"}
	empty.Annotations = map[string]string{contract.AnnotationSKRDomain: ""}
	got = trim(t, empty)
	if got.Labels != nil {
		t.Errorf("Trim kept an empty runtime-id label: %v", got.Labels)
	}
	if v, ok := got.Annotations[contract.AnnotationSKRDomain]; !ok || v != "" {
		t.Errorf("Trim dropped an empty skr-domain annotation: %v", got.Annotations)
	}

	for _, other := range []any{&metav1.Status{}, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{"a": "b"}}}} {
		if got, err := kymastore.Trim(other); err != nil || got != other {
			t.Errorf("Trim(%T) = %v, %v; want it unchanged", other, got, err)
		}
	}
}

func trim(t *testing.T, m *metav1.PartialObjectMetadata) *metav1.PartialObjectMetadata {
	t.Helper()
	got, err := kymastore.Trim(m)
	if err != nil {
		t.Fatal(err)
	}
	return got.(*metav1.PartialObjectMetadata)
}

// TestStoreEmptyLabel: a Kyma CR whose runtime-id label is empty is the
// runtime of its name (identity.RuntimeIDOf), whether or not Trim ran
// first.
func TestStoreEmptyLabel(t *testing.T) {
	raw := meta("runtime-e", "", "e.example.com")
	raw.Labels = map[string]string{contract.LabelRuntimeID: ""}
	trimmed, _ := kymastore.Trim(raw.DeepCopy())
	for _, obj := range []any{raw, trimmed} {
		s := kymastore.New()
		if err := s.Replace([]any{obj}, "1"); err != nil {
			t.Fatal(err)
		}
		rt, found, err := lookup(t, s, "runtime-e")
		if err != nil || !found || rt != (pinning.Runtime{ID: "runtime-e", KymaName: "runtime-e", SKRDomain: "e.example.com"}) {
			t.Errorf("LookupRuntime(runtime-e) = %+v, %v, %v", rt, found, err)
		}
		if _, found, err := lookup(t, s, ""); found || err != nil {
			t.Errorf("LookupRuntime(\"\") = %v, %v; an empty label names no runtime", found, err)
		}
	}
}

// BenchmarkLookupRuntime: one lookup per Check, from two map reads.
func BenchmarkLookupRuntime(b *testing.B) {
	s := kymastore.New()
	list := make([]any, 0, 10000)
	for i := range 10000 {
		list = append(list, meta("runtime-"+itoa(i), "", "d.example.com"))
	}
	if err := s.Replace(list, "1"); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, ok, err := s.LookupRuntime(ctx, "runtime-4242"); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

func itoa(i int) string {
	var b [8]byte
	n := len(b)
	for {
		n--
		b[n] = byte('0' + i%10)
		if i /= 10; i == 0 {
			return string(b[n:])
		}
	}
}

// TestStoreRetiredAndDeleting: the store keeps a Kyma's retirement (parsed
// once) and whether its deletion was asked for; Trim keeps the annotation
// and the deletion timestamp.
func TestStoreRetiredAndDeleting(t *testing.T) {
	r := contract.Retirement{IssuedBefore: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), From: time.Date(2026, 1, 2, 3, 14, 5, 0, time.UTC)}
	m := meta("a", "", "a.example.com")
	m.Annotations[contract.AnnotationRetiredCertificates] = r.String()
	now := metav1.Now()
	m.DeletionTimestamp = &now
	m.Finalizers = []string{"x"}
	tm := trim(t, m)
	if tm.Annotations[contract.AnnotationRetiredCertificates] != r.String() || tm.DeletionTimestamp == nil {
		t.Fatalf("Trim = %+v", tm)
	}
	s := kymastore.New()
	if err := s.Replace([]any{tm}, "1"); err != nil {
		t.Fatal(err)
	}
	rt, ok, err := lookup(t, s, "a")
	want := pinning.Runtime{ID: "a", KymaName: "a", SKRDomain: "a.example.com", Retired: pinning.RetirementOf(r.String()), Deleting: true}
	if err != nil || !ok || rt != want {
		t.Fatalf("LookupRuntime = %+v, %v, %v; want %+v", rt, ok, err, want)
	}
	if rt.Retired == (pinning.Retirement{}) {
		t.Fatal("the retirement was not read")
	}
}

// TestStoreClass: with ClassLabel set, the lookup carries the label's
// value as the runtime's class (ext-authz's rate limits), and ListWatch's
// trimming keeps that label; without it, no class.
func TestStoreClass(t *testing.T) {
	m := meta("kyma-b", "b", "b.example.com") // labels: runtime-id b, team x
	got := kymastore.TrimKeeping(m.DeepCopy(), "team")
	if len(got.Labels) != 2 || got.Labels["team"] != "x" || got.Labels[contract.LabelRuntimeID] != "b" {
		t.Errorf("trim keeping team = %v", got.Labels)
	}
	noRuntimeLabel := meta("kyma-c", "", "c.example.com")
	noRuntimeLabel.Labels = map[string]string{"team": "y"}
	if got := kymastore.TrimKeeping(noRuntimeLabel, "team"); len(got.Labels) != 1 || got.Labels["team"] != "y" {
		t.Errorf("trim keeping team of a Kyma without runtime-id label = %v", got.Labels)
	}
	for _, tc := range []struct{ classLabel, want string }{{"team", "x"}, {"", ""}, {"plan", ""}} {
		s := kymastore.New()
		s.ClassLabel = tc.classLabel
		if err := s.Replace([]any{got, m}, "1"); err != nil {
			t.Fatal(err)
		}
		rt, found, err := lookup(t, s, "b")
		if err != nil || !found || rt.Class != tc.want {
			t.Errorf("ClassLabel %q: LookupRuntime(b) = %+v, %v, %v; want class %q", tc.classLabel, rt, found, err, tc.want)
		}
	}
}
