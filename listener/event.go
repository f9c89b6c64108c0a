package listener

import (
	"context"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Content keys of an event object (Kyma listener v2).
const (
	KeyWatched    = "watched"
	KeyWatchedGVK = "watched-gvk"
	KeyRuntimeID  = "runtime-id"
)

// Event is the typed content of an event object.
type Event struct {
	// RuntimeID is the verified sender: the client certificate's CN.
	RuntimeID string
	// Watched is the SKR object that changed.
	Watched types.NamespacedName
	// WatchedGVK is its group, version and kind.
	WatchedGVK schema.GroupVersionKind
}

// newEventObject builds the Kyma-v2-shaped object of an accepted event. The
// values are plain maps and strings, so the object deep-copies and
// serializes like any unstructured object.
func newEventObject(runtimeID string, we *contract.WatchEvent) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		KeyWatched: map[string]any{
			"namespace": we.Watched.Namespace,
			"name":      we.Watched.Name,
		},
		KeyWatchedGVK: map[string]any{
			"group":   we.WatchedGvk.Group,
			"version": we.WatchedGvk.Version,
			"kind":    we.WatchedGvk.Kind,
		},
		KeyRuntimeID: runtimeID,
	}}
}

// EventFrom reads an event object delivered on Events(). ok is false when
// obj is not such an object.
func EventFrom(obj client.Object) (ev Event, ok bool) {
	u, isU := obj.(*unstructured.Unstructured)
	if !isU || u == nil {
		return Event{}, false
	}
	id, found, err := unstructured.NestedString(u.Object, KeyRuntimeID)
	if err != nil || !found || id == "" {
		return Event{}, false
	}
	ev.RuntimeID = id
	ev.Watched.Namespace, _, _ = unstructured.NestedString(u.Object, KeyWatched, "namespace")
	ev.Watched.Name, _, _ = unstructured.NestedString(u.Object, KeyWatched, "name")
	ev.WatchedGVK.Group, _, _ = unstructured.NestedString(u.Object, KeyWatchedGVK, "group")
	ev.WatchedGVK.Version, _, _ = unstructured.NestedString(u.Object, KeyWatchedGVK, "version")
	ev.WatchedGVK.Kind, _, _ = unstructured.NestedString(u.Object, KeyWatchedGVK, "kind")
	return ev, true
}

// EnqueueKyma is an event handler for source.Channel that enqueues the Kyma
// CR named by the event's runtime ID in namespace — what Lifecycle Manager
// does with Kyma's listener. Objects that are not listener events are
// dropped.
func EnqueueKyma(namespace string) handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ev, ok := EventFrom(e.Object); ok {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: ev.RuntimeID}})
			}
		},
	}
}
