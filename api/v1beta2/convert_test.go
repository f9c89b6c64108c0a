package v1beta2_test

import (
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// runtimeToUnstructured lets a test break a valid object in ways the typed
// struct cannot express (missing required fields, out-of-range values).
func runtimeToUnstructured(w *v1beta2.Watcher) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(w)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(v1beta2.GroupVersion.WithKind("Watcher"))
	return u, nil
}
