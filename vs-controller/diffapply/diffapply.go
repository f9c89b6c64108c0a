// Package diffapply writes Kubernetes objects with server-side apply, but only
// when the live object differs from the desired one, so that a controller in
// steady state issues no write requests at all.
//
// A desired object is compared with the live one in two ways:
//   - a hash of the desired object is kept in an annotation; a changed hash
//     means our intent changed (this also catches fields we stopped setting,
//     which a comparison of values alone cannot see);
//   - every value we set must be present and equal in the live object
//     (lists must have the same length), which catches hand edits of our
//     fields. Fields the API server defaults or other managers add are
//     ignored, as server-side apply leaves them alone too.
//
// When either check fails the object is applied with a field owner and
// forced ownership.
package diffapply

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// HashAnnotation holds the hash of the desired object last applied.
const HashAnnotation = "operator.kyma-project.io/applied-hash"

// FieldOwner is vs-controller's server-side apply field manager, in the
// KCP and in every SKR.
const FieldOwner = "vs-controller"

// Desired turns a typed object into the unstructured object to apply: it
// goes through the object's own JSON encoding (Istio's protobuf types have
// one), sets apiVersion and kind, drops status, creationTimestamp and null
// values, and records the hash of the result in HashAnnotation.
func Desired(obj runtime.Object, gvk schema.GroupVersionKind) (*unstructured.Unstructured, error) {
	m, err := toMap(obj)
	if err != nil {
		return nil, err
	}
	m = prune(m).(map[string]any)
	delete(m, "status")
	m["apiVersion"], m["kind"] = gvk.GroupVersion().String(), gvk.Kind
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
		delete(meta, "resourceVersion")
		delete(meta, "uid")
		delete(meta, "managedFields")
		delete(meta, "generation")
	}
	u := &unstructured.Unstructured{Object: m}
	anns := u.GetAnnotations()
	delete(anns, HashAnnotation)
	if len(anns) == 0 {
		anns = nil
	}
	u.SetAnnotations(anns)
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(raw)
	if anns == nil {
		anns = map[string]string{}
	}
	anns[HashAnnotation] = hex.EncodeToString(sum[:12])
	u.SetAnnotations(anns)
	return u, nil
}

// UpToDate reports whether live (typed or unstructured; nil when the object
// does not exist) already holds everything desired sets: the same hash
// annotation, and every value of desired.
func UpToDate(desired *unstructured.Unstructured, live runtime.Object) (bool, error) {
	if live == nil || reflect.ValueOf(live).IsNil() {
		return false, nil
	}
	var lm map[string]any
	if u, ok := live.(*unstructured.Unstructured); ok {
		lm = u.Object
	} else {
		var err error
		if lm, err = toMap(live); err != nil {
			return false, err
		}
	}
	// The hash first: a cheap answer whenever our intent changed.
	want := desired.GetAnnotations()[HashAnnotation]
	if meta, _ := lm["metadata"].(map[string]any); meta == nil {
		return false, nil
	} else if anns, _ := meta["annotations"].(map[string]any); anns == nil || anns[HashAnnotation] != want {
		return false, nil
	}
	for k, v := range desired.Object {
		if k == "apiVersion" || k == "kind" { // typed objects from a cache carry no TypeMeta
			continue
		}
		if !Subset(v, lm[k]) {
			return false, nil
		}
	}
	return true, nil
}

// Subset reports whether every value in want is present and equal in have.
// Maps are compared key by key (extra keys in have are ignored), lists
// element by element and must have the same length, nil in want matches
// anything, numbers compare by value whatever their Go type.
func Subset(want, have any) bool {
	switch w := want.(type) {
	case nil:
		return true
	case float64, int64, int, int32:
		wf, ok1 := number(w)
		hf, ok2 := number(have)
		return ok1 && ok2 && wf == hf
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			hv, ok := h[k]
			if !ok {
				if wv == nil || isEmptyMap(wv) {
					continue
				}
				return false
			}
			if !Subset(wv, hv) {
				return false
			}
		}
		return true
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return false
		}
		for i := range w {
			if !Subset(w[i], h[i]) {
				return false
			}
		}
		return true
	default:
		return reflect.DeepEqual(want, have)
	}
}

func number(v any) (float64, bool) {
	switch n := v.(type) {
	case float64:
		return n, true
	case int64:
		return float64(n), true
	case int:
		return float64(n), true
	case int32:
		return float64(n), true
	case json.Number:
		f, err := n.Float64()
		return f, err == nil
	}
	return 0, false
}

func isEmptyMap(v any) bool {
	m, ok := v.(map[string]any)
	return ok && len(m) == 0
}

// Writer is the part of a client that Ensure writes with: apply, and update
// for what apply cannot remove (Apply).
type Writer interface {
	Apply(ctx context.Context, obj runtime.ApplyConfiguration, opts ...client.ApplyOption) error
	Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error
}

// Ensure applies desired (from Desired) with fieldOwner and forced ownership
// unless live is up to date. It reports whether it wrote.
func Ensure(ctx context.Context, w Writer, fieldOwner string, desired *unstructured.Unstructured, live runtime.Object) (bool, error) {
	ok, err := UpToDate(desired, live)
	if err != nil {
		return false, err
	}
	if ok {
		return false, nil
	}
	_, err = Apply(ctx, w, fieldOwner, desired)
	return err == nil, err
}

// Apply applies desired with fieldOwner and forced ownership and returns
// the resourceVersion the server answered with. desired is not modified.
//
// Forced ownership takes every field desired sets, but server-side apply
// removes a list item desired leaves out only when no other field manager
// owns part of it: after a `kubectl edit` (an update) touched, say, a
// webhook of the runtime's webhook configuration, applying the
// configuration without that webhook left it in place, and the runtime
// kept calling for a Watcher long deleted (the e2e at 53b29bc). So when the
// answer still differs from desired, Apply replaces the object with desired
// (an update at the answered resourceVersion; a conflict is returned and
// retried by the caller's next pass). Extra map keys and the server's
// defaults are no difference (UpToDate), so an object others annotate or
// label is never replaced for that.
func Apply(ctx context.Context, w Writer, fieldOwner string, desired *unstructured.Unstructured) (string, error) {
	obj := desired.DeepCopy()
	if err := w.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(fieldOwner), client.ForceOwnership); err != nil {
		return "", fmt.Errorf("apply %s %s: %w", desired.GetKind(), client.ObjectKeyFromObject(desired), err)
	}
	if ok, err := UpToDate(desired, obj); err != nil || ok {
		return obj.GetResourceVersion(), err
	}
	replace := desired.DeepCopy()
	replace.SetResourceVersion(obj.GetResourceVersion())
	if err := w.Update(ctx, replace, client.FieldOwner(fieldOwner)); err != nil {
		return "", fmt.Errorf("replace %s %s (apply left what another field manager owns): %w", desired.GetKind(), client.ObjectKeyFromObject(desired), err)
	}
	return replace.GetResourceVersion(), nil
}

// Memo remembers, per object, the resourceVersion at which it was last
// found or made up to date with a desired hash, so that the next check needs
// only the object's metadata. Safe for concurrent use.
type Memo struct {
	mu sync.Mutex
	m  map[string][2]string
}

// Known reports whether the object key was up to date with hash at
// resourceVersion rv.
func (m *Memo) Known(key, rv, hash string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	return ok && rv != "" && e == [2]string{rv, hash}
}

// Record remembers that key is up to date with hash at rv.
func (m *Memo) Record(key, rv, hash string) {
	if rv == "" {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[string][2]string{}
	}
	m.m[key] = [2]string{rv, hash}
}

// ForgetPrefix drops every key starting with prefix.
func (m *Memo) ForgetPrefix(prefix string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for k := range m.m {
		if strings.HasPrefix(k, prefix) {
			delete(m.m, k)
		}
	}
}

// toMap encodes obj as JSON and decodes it into a generic map, so that
// typed, unstructured and protobuf-backed objects compare alike.
func toMap(obj any) (map[string]any, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// prune removes null values from maps, recursively.
func prune(v any) any {
	switch t := v.(type) {
	case map[string]any:
		for k, e := range t {
			if e == nil {
				delete(t, k)
				continue
			}
			t[k] = prune(e)
		}
		return t
	case []any:
		for i := range t {
			t[i] = prune(t[i])
		}
		return t
	default:
		return v
	}
}

// KnownAt reports whether key was last found or made up to date at
// resourceVersion rv (whatever the hash).
func (m *Memo) KnownAt(key, rv string) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	return ok && rv != "" && e[0] == rv
}
