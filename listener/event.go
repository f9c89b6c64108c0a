package listener

import (
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Content keys of an event object (Kyma listener v2).
const (
	KeyWatched    = "watched"
	KeyWatchedGVK = "watched-gvk"
	KeyRuntimeID  = "runtime-id"
	// KeyResync is set (to the reason) on a resync event only. Kyma's
	// listener v2 has no such key; consumers that ignore it still enqueue
	// the runtime, which is the right reaction.
	KeyResync = "resync"
)

// Event is the typed content of an event object.
type Event struct {
	// RuntimeID is the verified sender: the client certificate's CN.
	RuntimeID string
	// Watched is the SKR object that changed.
	Watched types.NamespacedName
	// WatchedGVK is its group, version and kind.
	WatchedGVK schema.GroupVersionKind
	// Resync is set on a resync event (docs/architecture.md §4.8): the reason
	// ("startup", "overflow", "expired") why the sender may have missed
	// changes of this runtime. Watched and WatchedGVK are then empty; the
	// operator must re-read the runtime completely.
	Resync string
	// SpanContext is the listener's span (KeyTraceParent) with
	// WithTracerProvider: the root of a new KCP trace. Invalid without a
	// tracer; continue the trace with ContextWithEvent.
	SpanContext trace.SpanContext
	// Link is the sender's span (KeyLinkedTraceParent), invalid when none
	// came. A runtime chose it: link it (Links), never make it a parent.
	Link trace.SpanContext
}

// IsResync reports whether obj is a resync event and its reason. On a
// resync, re-read everything of the runtime (Event.RuntimeID): changes may
// have been lost between the SKR and this listener.
func IsResync(obj client.Object) (reason string, ok bool) {
	ev, isEv := EventFrom(obj)
	if !isEv || ev.Resync == "" {
		return "", false
	}
	return ev.Resync, true
}

// newEventObject builds the Kyma-v2-shaped object of an accepted event. The
// values are plain maps and strings, so the object deep-copies and
// serializes like any unstructured object.
func newEventObject(runtimeID string, we *contract.WatchEvent, traceparent, linked string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{
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
	if we.Resync != "" {
		u.Object[KeyResync] = string(we.Resync)
	}
	if traceparent != "" {
		u.Object[KeyTraceParent] = traceparent
	}
	if linked != "" {
		u.Object[KeyLinkedTraceParent] = linked
	}
	return u
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
	ev.Resync, _, _ = unstructured.NestedString(u.Object, KeyResync)
	if tp, _, _ := unstructured.NestedString(u.Object, KeyTraceParent); tp != "" {
		ev.SpanContext = spanContextOf(tp)
	}
	if tp, _, _ := unstructured.NestedString(u.Object, KeyLinkedTraceParent); tp != "" {
		ev.Link = spanContextOf(tp)
	}
	return ev, true
}
