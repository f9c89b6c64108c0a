// Package admission turns admission.k8s.io/v1 AdmissionReviews into
// WatchEvents (docs/architecture.md §4.3) and serves them at
// POST /validate/<manager>. The answer is always "allowed" and never waits
// for the KCP: an emitted event is handed to an Enqueuer that must not block.
package admission

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Outcome says what the rules decided for one request. It is also the
// "result" label of the admission metrics.
type Outcome string

// Outcomes of Decide.
const (
	// OutcomeEmitted: the request emits a WatchEvent.
	OutcomeEmitted Outcome = "emitted"
	// OutcomeUnchanged: an UPDATE that did not change the watched field.
	OutcomeUnchanged Outcome = "unchanged"
	// OutcomeDryRun: dryRun requests never emit (sideEffects: NoneOnDryRun).
	OutcomeDryRun Outcome = "dry_run"
	// OutcomeConnect: CONNECT never emits.
	OutcomeConnect Outcome = "connect"
	// OutcomeOtherSubresource: UPDATEs of subresources other than status
	// (e.g. scale) are not watched.
	OutcomeOtherSubresource Outcome = "other_subresource"
)

// StatusSubresource is the subresource whose UPDATEs compare .status.
const StatusSubresource = "status"

// Errors of Decide; the handler answers them with 400.
var (
	ErrNoRequest = errors.New("admission review has no request")
	ErrNoUID     = errors.New("admission request has no uid")
	ErrNoName    = errors.New("cannot tell the watched object's name from the request")
)

// rawRef is a JSON value kept as a slice of the document it was decoded
// from, without a copy (json.RawMessage copies). Valid only while that
// document is.
type rawRef []byte

// UnmarshalJSON keeps data itself: encoding/json hands over a slice of its
// input, which the caller keeps alive while the view is used.
func (r *rawRef) UnmarshalJSON(data []byte) error {
	*r = data
	return nil
}

// objectView is the part of an object the rules read. Spec and Status stay
// raw slices of the review's body.
type objectView struct {
	Metadata struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
	} `json:"metadata"`
	Spec   rawRef `json:"spec"`
	Status rawRef `json:"status"`
}

// requestView is the part of an admission.k8s.io/v1 AdmissionRequest the
// rules read: no copy of object and oldObject, no userInfo or options.
type requestView struct {
	UID         types.UID               `json:"uid"`
	Kind        metav1.GroupVersionKind `json:"kind"`
	SubResource string                  `json:"subResource"`
	Name        string                  `json:"name"`
	Namespace   string                  `json:"namespace"`
	Operation   admissionv1.Operation   `json:"operation"`
	DryRun      *bool                   `json:"dryRun"`
	Object      rawRef                  `json:"object"`
	OldObject   rawRef                  `json:"oldObject"`
}

// reviewView is an AdmissionReview as the handler reads it.
type reviewView struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Request    *requestView `json:"request"`
}

func present(raw []byte) bool { return len(raw) > 0 && !bytes.Equal(raw, []byte("null")) }

// Decide applies the event rules of docs/architecture.md §4.3 to one request:
//
//   - dryRun: true never emits; CONNECT never emits.
//   - CREATE emits, named from .object.
//   - DELETE emits, named from .oldObject (from the request's name and
//     namespace when the API server sent no oldObject).
//   - UPDATE of the status subresource emits when .status differs between
//     oldObject and object.
//   - UPDATE of the main resource emits when .spec differs. A .spec present
//     on one side only is a change. When neither side has a .spec, the whole
//     object is compared, ignoring only metadata.resourceVersion and
//     metadata.managedFields (bookkeeping the API server rewrites on every
//     write): any other change, labels and annotations included, emits. For
//     an object that has a .spec, metadata-only and status-only changes never
//     emit.
//   - UPDATE of any other subresource (scale, …) does not emit.
//
// Fields compare semantically (JSON values), not as bytes. The event names
// the object by metadata.name of the object read (falling back to the
// request's name, e.g. before generateName is resolved) and by the
// request's namespace (falling back to the object's); its GVK is
// request.kind. An object whose JSON cannot be read is an error.
func Decide(req *admissionv1.AdmissionRequest) (*contract.WatchEvent, Outcome, error) {
	if req == nil {
		return nil, "", ErrNoRequest
	}
	return decide(&requestView{
		UID: req.UID, Kind: req.Kind, SubResource: req.SubResource, Name: req.Name, Namespace: req.Namespace,
		Operation: req.Operation, DryRun: req.DryRun, Object: req.Object.Raw, OldObject: req.OldObject.Raw,
	})
}

// decide is Decide on the handler's view of the request.
func decide(req *requestView) (*contract.WatchEvent, Outcome, error) {
	if req == nil {
		return nil, "", ErrNoRequest
	}
	if req.UID == "" {
		return nil, "", ErrNoUID
	}
	if req.DryRun != nil && *req.DryRun {
		return nil, OutcomeDryRun, nil
	}
	switch req.Operation {
	case admissionv1.Connect:
		return nil, OutcomeConnect, nil
	case admissionv1.Create:
		obj, err := decode("object", req.Object, true)
		if err != nil {
			return nil, "", err
		}
		return emit(req, obj)
	case admissionv1.Delete:
		obj, err := decode("oldObject", req.OldObject, false)
		if err != nil {
			return nil, "", err
		}
		return emit(req, obj)
	case admissionv1.Update:
		return decideUpdate(req)
	default:
		return nil, "", fmt.Errorf("unknown operation %q", req.Operation)
	}
}

func decideUpdate(req *requestView) (*contract.WatchEvent, Outcome, error) {
	oldObj, err := decode("oldObject", req.OldObject, true)
	if err != nil {
		return nil, "", err
	}
	newObj, err := decode("object", req.Object, true)
	if err != nil {
		return nil, "", err
	}
	var changed bool
	switch req.SubResource {
	case StatusSubresource:
		changed, err = fieldChanged(oldObj.Status, newObj.Status)
	case "":
		if present(oldObj.Spec) || present(newObj.Spec) {
			changed, err = fieldChanged(oldObj.Spec, newObj.Spec)
		} else {
			changed, err = objectChanged(req.OldObject, req.Object)
		}
	default:
		return nil, OutcomeOtherSubresource, nil
	}
	if err != nil {
		return nil, "", err
	}
	if !changed {
		return nil, OutcomeUnchanged, nil
	}
	return emit(req, newObj)
}

func emit(req *requestView, obj *objectView) (*contract.WatchEvent, Outcome, error) {
	name, namespace := req.Name, req.Namespace
	if obj != nil {
		if obj.Metadata.Name != "" {
			name = obj.Metadata.Name
		}
		if namespace == "" {
			namespace = obj.Metadata.Namespace
		}
	}
	if name == "" {
		return nil, "", ErrNoName
	}
	return &contract.WatchEvent{
		Watched: contract.ObjectKey{Namespace: namespace, Name: name},
		WatchedGvk: contract.GroupVersionKind{
			Group: req.Kind.Group, Version: req.Kind.Version, Kind: req.Kind.Kind,
		},
	}, OutcomeEmitted, nil
}

// decode reads the object view; a missing object is an error only when
// required.
func decode(field string, raw []byte, required bool) (*objectView, error) {
	if !present(raw) {
		if required {
			return nil, fmt.Errorf("request has no %s", field)
		}
		return nil, nil
	}
	var v objectView
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("decode %s: %w", field, err)
	}
	return &v, nil
}

// fieldChanged compares two raw JSON values semantically; absent and null
// are equal.
func fieldChanged(a, b []byte) (bool, error) {
	pa, pb := present(a), present(b)
	if !pa || !pb {
		return pa != pb, nil
	}
	return !jsonEqual(a, b, false), nil
}

// objectChanged compares whole objects without metadata.resourceVersion and
// metadata.managedFields.
func objectChanged(a, b []byte) (bool, error) {
	return !jsonEqual(a, b, true), nil
}
