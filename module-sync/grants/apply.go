package grants

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// apply writes obj, a typed object with its apiVersion and kind set, by
// server-side apply as fieldManager, forcing ownership: the fields it sets
// are what its JSON encoding holds, as a typed apply patch would send.
func apply(ctx context.Context, c client.Client, obj client.Object, fieldManager string) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return err
	}
	return c.Apply(ctx, client.ApplyConfigurationFromUnstructured(&unstructured.Unstructured{Object: m}),
		client.FieldOwner(fieldManager), client.ForceOwnership)
}
