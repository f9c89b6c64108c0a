package admission

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// fixture loads an AdmissionReview from testdata.
func fixture(t testing.TB, name string) *admissionv1.AdmissionReview {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var r admissionv1.AdmissionReview
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// obj is an object as JSON-decoded maps, for building variants.
type obj map[string]any

func parse(t testing.TB, raw []byte) obj {
	t.Helper()
	var o obj
	if err := json.Unmarshal(raw, &o); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o obj) raw(t testing.TB) runtime.RawExtension {
	t.Helper()
	if o == nil {
		return runtime.RawExtension{}
	}
	b, err := json.Marshal(o)
	if err != nil {
		t.Fatal(err)
	}
	return runtime.RawExtension{Raw: b}
}

func (o obj) meta() map[string]any { return o["metadata"].(map[string]any) }

var (
	kymaGVK   = metav1.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"}
	configGVK = metav1.GroupVersionKind{Version: "v1", Kind: "ConfigMap"}
)

func kyma(t testing.TB) obj {
	return parse(t, []byte(`{
	  "apiVersion": "operator.kyma-project.io/v1beta2", "kind": "Kyma",
	  "metadata": {"name": "kyma-1", "namespace": "kcp-system", "resourceVersion": "10", "generation": 1,
	    "labels": {"a": "b"}, "annotations": {"x": "y"},
	    "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
	  "spec": {"channel": "regular", "modules": [{"name": "m1", "channel": "fast"}], "count": 3},
	  "status": {"state": "Ready"}}`))
}

func configMap(t testing.TB) obj {
	return parse(t, []byte(`{
	  "apiVersion": "v1", "kind": "ConfigMap",
	  "metadata": {"name": "cm", "namespace": "default", "resourceVersion": "5", "labels": {"a": "b"},
	    "managedFields": [{"manager": "kubectl", "operation": "Update"}]},
	  "data": {"k": "v"}}`))
}

func request(t testing.TB, op admissionv1.Operation, gvk metav1.GroupVersionKind, sub string, oldObj, newObj obj) *admissionv1.AdmissionRequest {
	r := &admissionv1.AdmissionRequest{
		UID: "uid-1", Kind: gvk, Operation: op, SubResource: sub,
		Object: newObj.raw(t), OldObject: oldObj.raw(t),
	}
	for _, o := range []obj{newObj, oldObj} {
		if o != nil {
			r.Name, _ = o.meta()["name"].(string)
			r.Namespace, _ = o.meta()["namespace"].(string)
			break
		}
	}
	return r
}

func event(ns, name string, gvk metav1.GroupVersionKind) *contract.WatchEvent {
	return &contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: ns, Name: name},
		WatchedGvk: contract.GroupVersionKind{Group: gvk.Group, Version: gvk.Version, Kind: gvk.Kind},
	}
}

func TestDecide(t *testing.T) {
	yes := true
	no := false
	tests := []struct {
		name    string
		req     func(t *testing.T) *admissionv1.AdmissionRequest
		want    *contract.WatchEvent
		outcome Outcome
		wantErr bool
	}{
		{
			name: "fixture: CREATE of a Kyma emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return fixture(t, "admissionreview-mock-request-reference.json").Request
			},
			want: event("default", "kyma-sample", metav1.GroupVersionKind{
				Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Kyma"}),
			outcome: OutcomeEmitted,
		},
		{
			name: "fixture: status subresource UPDATE with a changed status emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return fixture(t, "admissionreview-mock-request-reference-status.json").Request
			},
			want: event("default", "sample-sample", metav1.GroupVersionKind{
				Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Sample"}),
			outcome: OutcomeEmitted,
		},
		{
			name: "fixture: status subresource UPDATE with an equal status does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := fixture(t, "admissionreview-mock-request-reference-status.json").Request
				r.Object = r.OldObject
				return r
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "fixture: dryRun CREATE does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := fixture(t, "admissionreview-mock-request-reference.json").Request
				r.DryRun = &yes
				return r
			},
			outcome: OutcomeDryRun,
		},
		{
			name: "dryRun: false CREATE emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Create, kymaGVK, "", nil, kyma(t))
				r.DryRun = &no
				return r
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "dryRun UPDATE with a spec change does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["spec"].(map[string]any)["channel"] = "fast"
				r := request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
				r.DryRun = &yes
				return r
			},
			outcome: OutcomeDryRun,
		},
		{
			name: "dryRun DELETE does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Delete, kymaGVK, "", kyma(t), nil)
				r.DryRun = &yes
				return r
			},
			outcome: OutcomeDryRun,
		},
		{
			name: "UPDATE with a spec change emits with request.kind",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["spec"].(map[string]any)["modules"] = []any{map[string]any{"name": "m1", "channel": "regular"}}
				return request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "UPDATE changing only labels, annotations, resourceVersion, managedFields, generation does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				m := n.meta()
				m["labels"] = map[string]any{"a": "c", "new": "x"}
				m["annotations"] = map[string]any{}
				m["resourceVersion"] = "11"
				m["generation"] = 2
				m["managedFields"] = []any{map[string]any{"manager": "other"}}
				return request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "UPDATE of the main resource changing only status does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["status"] = map[string]any{"state": "Error"}
				return request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "UPDATE with the same spec in another key order does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				o := kyma(t)
				o.meta()["resourceVersion"] = "9"
				r := request(t, admissionv1.Update, kymaGVK, "", o, kyma(t))
				r.Object.Raw = []byte(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma",` +
					`"metadata":{"name":"kyma-1","namespace":"kcp-system","resourceVersion":"10"},` +
					`"spec":{"count":3,"modules":[{"channel":"fast","name":"m1"}],"channel":"regular"}}`)
				return r
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "UPDATE with a numerically different spec value emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["spec"].(map[string]any)["count"] = 4
				return request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "UPDATE removing the spec emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				delete(n, "spec")
				return request(t, admissionv1.Update, kymaGVK, "", kyma(t), n)
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "UPDATE adding a spec emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				o := kyma(t)
				o["spec"] = nil
				return request(t, admissionv1.Update, kymaGVK, "", o, kyma(t))
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "object without spec: data change emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := configMap(t)
				n["data"] = map[string]any{"k": "w"}
				return request(t, admissionv1.Update, configGVK, "", configMap(t), n)
			},
			want:    event("default", "cm", configGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "object without spec: label change emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := configMap(t)
				n.meta()["labels"] = map[string]any{"a": "c"}
				return request(t, admissionv1.Update, configGVK, "", configMap(t), n)
			},
			want:    event("default", "cm", configGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "object without spec: only resourceVersion and managedFields changed does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := configMap(t)
				n.meta()["resourceVersion"] = "6"
				n.meta()["managedFields"] = []any{}
				return request(t, admissionv1.Update, configGVK, "", configMap(t), n)
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "status subresource: status change emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["status"] = map[string]any{"state": "Processing"}
				return request(t, admissionv1.Update, kymaGVK, StatusSubresource, kyma(t), n)
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "status subresource: status appearing emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				o := kyma(t)
				delete(o, "status")
				return request(t, admissionv1.Update, kymaGVK, StatusSubresource, o, kyma(t))
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "status subresource: only spec and metadata differ does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["spec"].(map[string]any)["channel"] = "fast"
				n.meta()["labels"] = map[string]any{}
				return request(t, admissionv1.Update, kymaGVK, StatusSubresource, kyma(t), n)
			},
			outcome: OutcomeUnchanged,
		},
		{
			name: "other subresource (scale) does not emit",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n["spec"].(map[string]any)["count"] = 5
				return request(t, admissionv1.Update, kymaGVK, "scale", kyma(t), n)
			},
			outcome: OutcomeOtherSubresource,
		},
		{
			name: "DELETE emits from oldObject",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Delete, kymaGVK, "", kyma(t), nil)
				r.Name = "" // the name comes from oldObject
				return r
			},
			want:    event("kcp-system", "kyma-1", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "DELETE without oldObject emits from the request's name",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Delete, kymaGVK, "", nil, nil)
				r.Name, r.Namespace = "gone", "ns"
				return r
			},
			want:    event("ns", "gone", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "CREATE with generateName takes the object's name",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				n.meta()["name"] = "kyma-x7k2p"
				r := request(t, admissionv1.Create, kymaGVK, "", nil, n)
				r.Name = ""
				return r
			},
			want:    event("kcp-system", "kyma-x7k2p", kymaGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "cluster-scoped CREATE emits with an empty namespace",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := configMap(t)
				delete(n.meta(), "namespace")
				return request(t, admissionv1.Create, configGVK, "", nil, n)
			},
			want:    event("", "cm", configGVK),
			outcome: OutcomeEmitted,
		},
		{
			name: "CONNECT never emits",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return request(t, admissionv1.Connect, metav1.GroupVersionKind{Version: "v1", Kind: "PodExecOptions"}, "exec", nil, obj{"kind": "PodExecOptions", "metadata": map[string]any{}})
			},
			outcome: OutcomeConnect,
		},
		{name: "no request", req: func(*testing.T) *admissionv1.AdmissionRequest { return nil }, wantErr: true},
		{
			name: "no uid",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Create, kymaGVK, "", nil, kyma(t))
				r.UID = ""
				return r
			},
			wantErr: true,
		},
		{
			name: "unknown operation",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return request(t, "PATCH", kymaGVK, "", nil, kyma(t))
			},
			wantErr: true,
		},
		{
			name: "CREATE without object",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return request(t, admissionv1.Create, kymaGVK, "", nil, nil)
			},
			wantErr: true,
		},
		{
			name: "UPDATE without oldObject",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				return request(t, admissionv1.Update, kymaGVK, "", nil, kyma(t))
			},
			wantErr: true,
		},
		{
			name: "object is not a JSON object",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				r := request(t, admissionv1.Create, kymaGVK, "", nil, kyma(t))
				r.Object.Raw = []byte(`[1,2]`)
				return r
			},
			wantErr: true,
		},
		{
			name: "CREATE with no name anywhere",
			req: func(t *testing.T) *admissionv1.AdmissionRequest {
				n := kyma(t)
				delete(n.meta(), "name")
				r := request(t, admissionv1.Create, kymaGVK, "", nil, n)
				r.Name = ""
				return r
			},
			wantErr: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ev, outcome, err := Decide(tt.req(t))
			if tt.wantErr {
				if err == nil {
					t.Fatalf("want an error, got event %+v outcome %q", ev, outcome)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if outcome != tt.outcome {
				t.Errorf("outcome = %q, want %q", outcome, tt.outcome)
			}
			switch {
			case tt.want == nil && ev != nil:
				t.Errorf("emitted %+v, want nothing", *ev)
			case tt.want != nil && ev == nil:
				t.Errorf("emitted nothing, want %+v", *tt.want)
			case tt.want != nil && *ev != *tt.want:
				t.Errorf("emitted %+v, want %+v", *ev, *tt.want)
			}
		})
	}
}
