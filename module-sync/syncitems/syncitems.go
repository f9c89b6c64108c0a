// Package syncitems applies a SyncResource's items (docs/architecture.md §4.11): it
// makes one runtime (SKR) hold what a SyncResource's items say, through a
// controller-runtime client for that runtime, and reports per item.
//
//   - CreateAndSync: server-side apply, field manager "module-sync", forced,
//     on every pass, so drift in the runtime is corrected.
//   - CreateAndIgnore: created when absent, never changed afterwards.
//   - Delete: made absent.
//
// An item's subresource status is applied to the status subresource after
// the object. Items that leave the spec have their objects deleted from the
// runtime (the inventory is status.items[].object), and Cleanup deletes what
// a SyncResource created when it is deleted. Objects module-sync creates
// carry the annotation OwnerAnnotation naming their SyncResource; it deletes
// only objects that carry it, so an object someone else created is never
// pruned.
//
// One bad item never stops the others: an invalid object, a Secret (refused:
// the KCP copy must not hold sensitive data), or a kind the runtime does not
// serve gets its own item state. Only an unreachable runtime ends a pass
// early, so that a pass costs one timeout rather than one per item.
//
// The engine does not write the SyncResource: the caller stores
// Result.Items and Result.Summary in its status.
package syncitems

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

const (
	// FieldManager is the server-side apply field manager of module-sync.
	FieldManager = "module-sync"
	// OwnerAnnotation, on an object in the runtime, names the SyncResource
	// ("<namespace>/<name>" in the KCP) that created it.
	OwnerAnnotation = "operator.kyma-project.io/sync-resource"
	// ConditionSynced is the condition type Summary returns.
	ConditionSynced = "Synced"
)

// Result is the outcome of one Apply pass.
type Result struct {
	// Items is the new status.items: one per spec item in spec order,
	// then the removed items whose objects could not be deleted yet.
	Items []v1alpha1.ItemStatus
	// Unreachable is the error that ended the pass early when the runtime
	// could not be reached; nil otherwise.
	Unreachable error
	// Retry says an item failed for a reason that may go away by itself
	// (an API error, a kind not served yet, an unreachable runtime); items
	// that are refused or invalid wait for the SyncResource to change.
	Retry bool
}

// Summary condenses a result into a state and the Synced condition (its
// LastTransitionTime is left for meta.SetStatusCondition to fill).
func (r Result) Summary() (v1alpha1.State, metav1.Condition) {
	var failed, refused []string
	for _, it := range r.Items {
		switch it.State {
		case v1alpha1.ItemError:
			failed = append(failed, it.Name)
		case v1alpha1.ItemRefused:
			refused = append(refused, it.Name)
		}
	}
	cond := metav1.Condition{Type: ConditionSynced, Status: metav1.ConditionTrue, Reason: "Applied",
		Message: fmt.Sprintf("%d item(s) applied", len(r.Items))}
	switch {
	case r.Unreachable != nil:
		cond.Status, cond.Reason = metav1.ConditionFalse, "RuntimeUnreachable"
		cond.Message = "the runtime cannot be reached: " + r.Unreachable.Error()
		return v1alpha1.StateError, cond
	case len(failed) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "ItemsFailed"
		cond.Message = "items failed: " + strings.Join(failed, ", ")
		if len(refused) > 0 {
			cond.Message += "; refused: " + strings.Join(refused, ", ")
		}
		return v1alpha1.StateError, cond
	case len(refused) > 0:
		cond.Status, cond.Reason = metav1.ConditionFalse, "ItemsRefused"
		cond.Message = "items refused: " + strings.Join(refused, ", ")
		return v1alpha1.StateWarning, cond
	}
	return v1alpha1.StateReady, cond
}

// itemError is an item failure; permanent ones are not retried.
type itemError struct {
	state       v1alpha1.ItemState
	msg         string
	permanent   bool
	unreachable bool
}

func invalid(format string, args ...any) *itemError {
	return &itemError{state: v1alpha1.ItemError, msg: "invalid object: " + fmt.Sprintf(format, args...), permanent: true}
}

// target is a parsed item object.
type target struct {
	obj *unstructured.Unstructured
	ref v1alpha1.ObjectReference
}

// Apply makes the runtime hold what sr's items say and prunes objects of
// items that left the spec (sr.Status.Items is the previous inventory).
// skr should act as the module's user (grants.User), so that the runtime
// itself refuses what grant does not allow; grant is also checked before
// every call.
func Apply(ctx context.Context, skr client.Client, grant grants.Grant, sr *v1alpha1.SyncResource) Result {
	owner := sr.Namespace + "/" + sr.Name
	prev := map[string]v1alpha1.ItemStatus{}
	for _, it := range sr.Status.Items {
		prev[it.Name] = it
	}
	var res Result
	inSpec := map[string]bool{}
	current := map[v1alpha1.ObjectReference]bool{}
	var stale []v1alpha1.ObjectReference // objects of items whose target changed
	for _, item := range sr.Spec.Items {
		inSpec[item.Name] = true
		old, hadOld := prev[item.Name]
		if res.Unreachable != nil {
			st := v1alpha1.ItemStatus{Name: item.Name, State: v1alpha1.ItemError,
				Message: "not attempted: the runtime cannot be reached"}
			if hadOld {
				st.Object = old.Object
			}
			res.Items = append(res.Items, st)
			continue
		}
		st, err := applyItem(ctx, skr, grant, owner, item, old.Object)
		if st.Object != nil {
			current[*st.Object] = true
		}
		if err != nil {
			st.State, st.Message = err.state, err.msg
			if !err.permanent {
				res.Retry = true
			}
			if st.Object == nil && hadOld {
				st.Object = old.Object // keep the inventory until the item applies again
				if old.Object != nil {
					current[*old.Object] = true
				}
			}
			if isUnreachable(err) {
				res.Unreachable = errors.New(err.msg)
			}
		} else if hadOld && old.Object != nil && (st.Object == nil || *st.Object != *old.Object) {
			stale = append(stale, *old.Object)
		}
		res.Items = append(res.Items, st)
	}
	if res.Unreachable != nil {
		res.Retry = true
	}

	// Prune the objects of removed items (kept in status until gone) and of
	// items whose object changed.
	var removed []string
	for name, it := range prev {
		if !inSpec[name] && it.Object != nil {
			removed = append(removed, name)
		}
	}
	sort.Strings(removed)
	for _, name := range removed {
		it := prev[name]
		if current[*it.Object] {
			continue // another item now applies the same object
		}
		if res.Unreachable != nil {
			res.Items = append(res.Items, v1alpha1.ItemStatus{Name: name, State: v1alpha1.ItemError, Object: it.Object,
				Message: "removed from the spec; not deleted yet: the runtime cannot be reached"})
			continue
		}
		if err := deleteOwned(ctx, skr, grant, owner, *it.Object); err != nil {
			var refused *refusal
			if errors.As(err, &refused) {
				// Left in the runtime; the inventory forgets it.
				res.Items = append(res.Items, v1alpha1.ItemStatus{Name: name, State: v1alpha1.ItemRefused,
					Message: "removed from the spec; not deleted: " + err.Error()})
				continue
			}
			res.Retry = true
			res.Items = append(res.Items, v1alpha1.ItemStatus{Name: name, State: v1alpha1.ItemError, Object: it.Object,
				Message: "removed from the spec; deleting the object failed: " + skrclient.Bounded(err.Error())})
		}
	}
	for _, ref := range stale {
		if current[ref] || res.Unreachable != nil {
			continue
		}
		// Best effort: the item's inventory now names its new object.
		_ = deleteOwned(ctx, skr, grant, owner, ref)
	}
	return res
}

// Unreachable is the result of a pass that could not reach the runtime
// before its first item (err): every item "not attempted", the inventory
// kept, retried.
func Unreachable(sr *v1alpha1.SyncResource, err error) Result {
	res := Result{Unreachable: err, Retry: true}
	prev := map[string]*v1alpha1.ObjectReference{}
	for _, it := range sr.Status.Items {
		prev[it.Name] = it.Object
	}
	for _, item := range sr.Spec.Items {
		res.Items = append(res.Items, v1alpha1.ItemStatus{Name: item.Name, State: v1alpha1.ItemError, Object: prev[item.Name],
			Message: "not attempted: the runtime cannot be reached"})
		delete(prev, item.Name)
	}
	for _, it := range sr.Status.Items {
		if _, removed := prev[it.Name]; removed && it.Object != nil {
			res.Items = append(res.Items, v1alpha1.ItemStatus{Name: it.Name, State: v1alpha1.ItemError, Object: it.Object,
				Message: "removed from the spec; not deleted yet: the runtime cannot be reached"})
		}
	}
	return res
}

// Cleanup deletes from the runtime what sr created: its inventory and the
// objects of its CreateAndSync items, as far as they carry OwnerAnnotation
// for sr and grant allows it (an object outside the grant is left in the
// runtime). It returns an error while any deletion fails, so the caller
// keeps its finalizer and retries.
func Cleanup(ctx context.Context, skr client.Client, grant grants.Grant, sr *v1alpha1.SyncResource) error {
	owner := sr.Namespace + "/" + sr.Name
	seen := map[v1alpha1.ObjectReference]bool{}
	var refs []v1alpha1.ObjectReference
	add := func(ref v1alpha1.ObjectReference) {
		if !seen[ref] {
			seen[ref] = true
			refs = append(refs, ref)
		}
	}
	for _, it := range sr.Status.Items {
		if it.Object != nil {
			add(*it.Object)
		}
	}
	for _, item := range sr.Spec.Items {
		if item.Strategy != v1alpha1.CreateAndSync {
			continue
		}
		if t, err := parse(item.Resource); err == nil && !isSecret(t.obj.GroupVersionKind()) {
			add(t.ref)
		}
	}
	var errs []error
	for _, ref := range refs {
		if err := deleteOwned(ctx, skr, grant, owner, ref); err != nil {
			var refused *refusal
			if errors.As(err, &refused) {
				continue
			}
			errs = append(errs, fmt.Errorf("%s %s/%s: %w", ref.Kind, ref.Namespace, ref.Name, err))
			if isUnreachableErr(err) {
				break
			}
		}
	}
	return errors.Join(errs...)
}

func applyItem(ctx context.Context, skr client.Client, grant grants.Grant, owner string, item v1alpha1.SyncItem, old *v1alpha1.ObjectReference) (v1alpha1.ItemStatus, *itemError) {
	st := v1alpha1.ItemStatus{Name: item.Name, State: v1alpha1.ItemReady}
	t, err := parse(item.Resource)
	if err != nil {
		return st, err
	}
	gvk := t.obj.GroupVersionKind()
	if err := grant.CheckKind(gvk.GroupKind()); err != nil {
		return st, refused(err)
	}
	namespaced, nerr := skr.IsObjectNamespaced(t.obj)
	switch {
	case meta.IsNoMatchError(nerr):
		return st, &itemError{state: v1alpha1.ItemError, msg: fmt.Sprintf("no such kind in the runtime: %s", gvk)}
	case nerr != nil:
		return st, apiError("discovery", nerr)
	case namespaced && t.ref.Namespace == "":
		return st, invalid("%s is namespaced: metadata.namespace must be set", gvk.Kind)
	case !namespaced && t.ref.Namespace != "":
		return st, invalid("%s is cluster-scoped: metadata.namespace must not be set", gvk.Kind)
	}
	if err := grant.Check(gvk, namespaced, t.ref.Namespace, t.ref.Name); err != nil {
		return st, refused(err)
	}
	var status map[string]any
	if item.Subresource != nil && item.Strategy != v1alpha1.Delete {
		if status, err = subresourceStatus(*item.Subresource, t); err != nil {
			return st, err
		}
	}

	switch item.Strategy {
	case v1alpha1.Delete:
		live, err := get(ctx, skr, t.ref)
		switch {
		case apierrors.IsNotFound(err):
			st.Message = "absent"
			return st, nil
		case err != nil:
			return st, apiError("get", err)
		case live.GetAnnotations()[OwnerAnnotation] != owner:
			return st, refused(errors.New("exists and was not created by this SyncResource: module-sync deletes only what it created"))
		}
		err = skr.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground),
			client.Preconditions{UID: ptr(live.GetUID())})
		if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
			return st, apiError("delete", err)
		}
		st.Message = "absent"
		return st, nil

	case v1alpha1.CreateAndSync:
		live, err := get(ctx, skr, t.ref)
		switch {
		case err == nil && live.GetAnnotations()[OwnerAnnotation] != owner && !item.Adopt:
			return st, refused(errors.New("exists and was not created by this SyncResource; set adopt: true on the item to take it over"))
		case err == nil && live.GetAnnotations()[OwnerAnnotation] != owner && isServiceAccount(gvk):
			// The module's workloads may run as the ServiceAccounts it
			// created (grants.WorkloadPolicy): adopting one would let them
			// act as whatever the runtime bound to it.
			return st, refused(errors.New("exists and was not created by this SyncResource; a ServiceAccount is never adopted (the module's workloads could run as it)"))
		case err != nil && !apierrors.IsNotFound(err):
			return st, apiError("get", err)
		}
		obj := forApply(t.obj, owner)
		if err := skr.Apply(ctx, client.ApplyConfigurationFromUnstructured(obj), client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
			return st, apiError("apply", err)
		}
		st.Object = &t.ref
		st.Message = "applied"
		if status != nil {
			if err := applyStatus(ctx, skr, t, status); err != nil {
				return st, err
			}
			st.Message = "applied with status"
		}
		return st, nil

	case v1alpha1.CreateAndIgnore:
		live, err := get(ctx, skr, t.ref)
		switch {
		case err == nil:
			if live.GetAnnotations()[OwnerAnnotation] == owner || (old != nil && *old == t.ref) {
				st.Object = &t.ref
				st.Message = "created earlier; left alone"
			} else {
				st.Message = "exists and was not created by module-sync; left alone"
			}
			return st, nil
		case !apierrors.IsNotFound(err):
			return st, apiError("get", err)
		}
		obj := forApply(t.obj, owner)
		if err := skr.Create(ctx, obj, client.FieldOwner(FieldManager)); err != nil {
			return st, apiError("create", err)
		}
		st.Object = &t.ref
		st.Message = "created"
		if status != nil {
			if err := applyStatus(ctx, skr, t, status); err != nil {
				return st, err
			}
			st.Message = "created with status"
		}
		return st, nil
	}
	return st, &itemError{state: v1alpha1.ItemError, permanent: true, msg: fmt.Sprintf("unknown strategy %q", item.Strategy)}
}

// parse reads an embedded object and checks it names one object.
func parse(ext runtime.RawExtension) (target, *itemError) {
	m := map[string]any{}
	switch {
	case len(ext.Raw) > 0:
		if err := json.Unmarshal(ext.Raw, &m); err != nil {
			return target{}, invalid("%v", err)
		}
	case ext.Object != nil:
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(ext.Object); err != nil {
			return target{}, invalid("%v", err)
		}
	default:
		return target{}, invalid("empty")
	}
	obj := &unstructured.Unstructured{Object: m}
	if _, ok := m["metadata"].(map[string]any); !ok && m["metadata"] != nil {
		return target{}, invalid("metadata is not an object")
	}
	if obj.GetAPIVersion() == "" || obj.GetKind() == "" {
		return target{}, invalid("apiVersion and kind must be set")
	}
	if _, err := schema.ParseGroupVersion(obj.GetAPIVersion()); err != nil {
		return target{}, invalid("%v", err)
	}
	if obj.GetName() == "" {
		return target{}, invalid("metadata.name must be set")
	}
	return target{obj: obj, ref: v1alpha1.ObjectReference{
		APIVersion: obj.GetAPIVersion(), Kind: obj.GetKind(), Namespace: obj.GetNamespace(), Name: obj.GetName(),
	}}, nil
}

func isSecret(gvk schema.GroupVersionKind) bool { return gvk.Group == "" && gvk.Kind == "Secret" }

func isServiceAccount(gvk schema.GroupVersionKind) bool {
	return gvk.Group == "" && gvk.Kind == "ServiceAccount"
}

// ServiceAccounts are the ServiceAccounts ("namespace/name") the inventory
// of srs says module-sync created: what grants.Grant.ServiceAccounts
// wants.
func ServiceAccounts(srs []v1alpha1.SyncResource) []string {
	var out []string
	for i := range srs {
		for _, it := range srs[i].Status.Items {
			if o := it.Object; o != nil && o.Kind == "ServiceAccount" && o.APIVersion == "v1" && o.Namespace != "" {
				out = append(out, o.Namespace+"/"+o.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

// refusal is an error of the grant check: the item is refused, not retried.
type refusal struct{ error }

func (r *refusal) Unwrap() error { return r.error }

func refused(err error) *itemError {
	return &itemError{state: v1alpha1.ItemRefused, permanent: true, msg: err.Error()}
}

// get reads the object ref names from the runtime.
func get(ctx context.Context, skr client.Client, ref v1alpha1.ObjectReference) (*unstructured.Unstructured, error) {
	live := &unstructured.Unstructured{}
	live.SetAPIVersion(ref.APIVersion)
	live.SetKind(ref.Kind)
	return live, skr.Get(ctx, client.ObjectKey{Namespace: ref.Namespace, Name: ref.Name}, live)
}

// forApply is the object without status and server-set metadata, annotated
// with its owner.
func forApply(in *unstructured.Unstructured, owner string) *unstructured.Unstructured {
	out := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range in.Object {
		if k != "metadata" && k != "status" {
			out.Object[k] = runtime.DeepCopyJSONValue(v)
		}
	}
	out.SetName(in.GetName())
	out.SetNamespace(in.GetNamespace())
	out.SetLabels(in.GetLabels())
	ann := in.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[OwnerAnnotation] = owner
	out.SetAnnotations(ann)
	return out
}

// subresourceStatus returns the status of an item's subresource, which must
// name the item's object.
func subresourceStatus(ext runtime.RawExtension, t target) (map[string]any, *itemError) {
	m := map[string]any{}
	if len(ext.Raw) > 0 {
		if err := json.Unmarshal(ext.Raw, &m); err != nil {
			return nil, &itemError{state: v1alpha1.ItemError, permanent: true, msg: "invalid subresource: " + err.Error()}
		}
	} else if ext.Object != nil {
		var err error
		if m, err = runtime.DefaultUnstructuredConverter.ToUnstructured(ext.Object); err != nil {
			return nil, &itemError{state: v1alpha1.ItemError, permanent: true, msg: "invalid subresource: " + err.Error()}
		}
	}
	sub := &unstructured.Unstructured{Object: m}
	for _, f := range []struct{ got, want string }{
		{sub.GetAPIVersion(), t.ref.APIVersion}, {sub.GetKind(), t.ref.Kind}, {sub.GetName(), t.ref.Name}, {sub.GetNamespace(), t.ref.Namespace},
	} {
		if f.got != "" && f.got != f.want {
			return nil, &itemError{state: v1alpha1.ItemError, permanent: true,
				msg: fmt.Sprintf("invalid subresource: it names %q where the resource has %q", f.got, f.want)}
		}
	}
	status, ok := m["status"].(map[string]any)
	if !ok {
		return nil, &itemError{state: v1alpha1.ItemError, permanent: true, msg: "invalid subresource: no status object"}
	}
	return status, nil
}

func applyStatus(ctx context.Context, skr client.Client, t target, status map[string]any) *itemError {
	obj := &unstructured.Unstructured{Object: map[string]any{"status": runtime.DeepCopyJSONValue(status)}}
	obj.SetGroupVersionKind(t.obj.GroupVersionKind())
	obj.SetName(t.ref.Name)
	obj.SetNamespace(t.ref.Namespace)
	data, err := json.Marshal(obj.Object)
	if err != nil {
		return &itemError{state: v1alpha1.ItemError, permanent: true, msg: "invalid subresource: " + err.Error()}
	}
	if err := skr.Status().Patch(ctx, obj, client.RawPatch(types.ApplyPatchType, data),
		client.FieldOwner(FieldManager), client.ForceOwnership); err != nil {
		return apiError("apply status", err)
	}
	return nil
}

// deleteOwned deletes the object if grant allows it and it carries owner
// in OwnerAnnotation; an absent object or one owned by someone else counts
// as done; an object outside the grant is a *refusal.
func deleteOwned(ctx context.Context, skr client.Client, grant grants.Grant, owner string, ref v1alpha1.ObjectReference) error {
	gvk := schema.FromAPIVersionAndKind(ref.APIVersion, ref.Kind)
	if err := grant.CheckKind(gvk.GroupKind()); err != nil {
		return &refusal{err}
	}
	probe := &unstructured.Unstructured{}
	probe.SetGroupVersionKind(gvk)
	namespaced, err := skr.IsObjectNamespaced(probe)
	switch {
	case meta.IsNoMatchError(err):
		return nil
	case err != nil:
		return err
	}
	if err := grant.Check(gvk, namespaced, ref.Namespace, ref.Name); err != nil {
		return &refusal{err}
	}
	live, err := get(ctx, skr, ref)
	switch {
	case apierrors.IsNotFound(err) || meta.IsNoMatchError(err):
		return nil
	case err != nil:
		return err
	case live.GetAnnotations()[OwnerAnnotation] != owner:
		return nil
	}
	err = skr.Delete(ctx, live, client.PropagationPolicy(metav1.DeletePropagationBackground),
		client.Preconditions{UID: ptr(live.GetUID())})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // gone, or replaced by a new object since the read
	}
	return err
}

func ptr[T any](v T) *T { return &v }

// apiError turns an error of the runtime's API into an item error; its
// message keeps the API server's words.
func apiError(op string, err error) *itemError {
	if grants.IsWorkloadRefusal(err) {
		// The runtime's own admission refused what the grant does not
		// cover: Refused. Retried with backoff all the same: a
		// ServiceAccount the module creates in the same pass enters its
		// inventory, and so the policy's parameters, only after the pass.
		return &itemError{state: v1alpha1.ItemRefused,
			msg: "refused by the runtime's admission (" + grants.WorkloadPolicyName + "): " + skrclient.Bounded(err.Error())}
	}
	e := &itemError{state: v1alpha1.ItemError, msg: op + ": " + skrclient.Bounded(err.Error())}
	if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
		e.permanent = true
	}
	if isUnreachableErr(err) {
		e.msg = "the runtime cannot be reached: " + skrclient.Bounded(err.Error())
		e.state = v1alpha1.ItemError
		e.permanent = false
		e.unreachable = true
	}
	return e
}

func isUnreachable(e *itemError) bool { return e.unreachable }

// isUnreachableErr says err did not come from the runtime's API server:
// no status from the server and not a kind the server does not serve.
func isUnreachableErr(err error) bool {
	var status apierrors.APIStatus
	return err != nil && !errors.As(err, &status) && !meta.IsNoMatchError(err)
}
