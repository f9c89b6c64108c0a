package v1beta2

import (
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// FieldName selects the part of a watched object whose changes emit events.
// +kubebuilder:validation:Enum=spec;status
type FieldName string

const (
	// SpecField emits on changes of .spec (or of any field for objects
	// without .spec).
	SpecField FieldName = "spec"
	// StatusField watches the status subresource and emits on changes of
	// .status.
	StatusField FieldName = "status"
)

// State is the coarse state of a Watcher, as Lifecycle Manager reports it.
// The enum is Lifecycle Manager's, so that Watchers it wrote stay valid.
// +kubebuilder:validation:Enum=Ready;Processing;Error;Deleting;Warning;Unmanaged;""
type State string

// Watcher states.
const (
	StateReady      State = "Ready"
	StateProcessing State = "Processing"
	StateError      State = "Error"
	StateDeleting   State = "Deleting"
	StateWarning    State = "Warning"
	// StateUnmanaged is Lifecycle Manager's; vs-controller never sets it.
	StateUnmanaged State = "Unmanaged"
)

// Service names the in-cluster Service of the operator's listener. The
// schema accepts any value, as Lifecycle Manager's does; vs-controller
// reports values it cannot route in the Watcher's status (SpecProblems).
type Service struct {
	// Name of the Service; a DNS-1035 label.
	Name string `json:"name"`
	// Namespace of the Service; a DNS-1123 label.
	Namespace string `json:"namespace"`
	// Port of the listener on the Service, 1..65535.
	Port int64 `json:"port"`
}

// WatchableGVR names the resource the SKR webhook watches.
type WatchableGVR struct {
	// Group of the resource; empty for the core group.
	Group string `json:"group"`
	// Version of the resource; "*" matches every version. Not empty.
	Version string `json:"version"`
	// Resource is the plural resource name, e.g. "kymas". Not empty.
	Resource string `json:"resource"`
}

// GatewayConfig selects the Istio Gateways the events arrive through.
type GatewayConfig struct {
	// LabelSelector selects Istio Gateways (in the controller's gateway
	// namespace) whose hosts the VirtualService serves.
	LabelSelector metav1.LabelSelector `json:"selector"`
}

// WatcherSpec defines what an operator watches in every SKR and where its
// events go.
type WatcherSpec struct {
	// ServiceInfo is the operator's listener Service in the KCP.
	ServiceInfo Service `json:"serviceInfo"`

	// Manager names the operator; events are posted to
	// /v2/<manager>/event. When empty, the label
	// operator.kyma-project.io/managed-by is used. It must be a DNS-1123
	// label; vs-controller reports any other value in the Watcher's status
	// (the schema accepts any string, as Lifecycle Manager's does).
	// +optional
	Manager string `json:"manager,omitempty"`

	// LabelsToWatch restricts the watched objects to those with these labels.
	// +optional
	LabelsToWatch map[string]string `json:"labelsToWatch,omitempty"`

	// ResourceToWatch is the resource watched in every SKR.
	ResourceToWatch WatchableGVR `json:"resourceToWatch"`

	// Field is the part of the object whose changes emit events.
	Field FieldName `json:"field"`

	// Gateway selects the Istio Gateways the events arrive through.
	Gateway GatewayConfig `json:"gateway"`

	// Heartbeats opts the manager in to heartbeat events (a body
	// {"watched":{},"watchedGvk":{},"heartbeat":true} every
	// --heartbeat-interval per runtime, docs/architecture.md §4.8). Off by
	// default: Kyma's listener has no field for the marker and hands a
	// heartbeat to its operator as an ordinary event with an empty object,
	// a full reconcile of the runtime. A manager gets heartbeats when any
	// of its usable Watchers sets this. Not in Lifecycle Manager's CRD.
	// +optional
	Heartbeats bool `json:"heartbeats,omitempty"`
}

// WatcherStatus is the observed state of a Watcher.
type WatcherStatus struct {
	// State is the coarse state of the Watcher.
	// +optional
	State State `json:"state,omitempty"`

	// Conditions describe the VirtualService and the SKR configuration.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// SilentRuntimes counts the runtimes whose watch path to this
	// Watcher's manager is broken now (vs-controller's health evaluation,
	// docs/operations.md "My operator stopped hearing from a runtime"): the
	// runtime is not heard, its SKR webhook configuration is missing or
	// altered, or its deliveries to this manager fail. Each runtime's cause
	// is an Event on its Kyma. Written only when the count changes.
	// +optional
	SilentRuntimes int32 `json:"silentRuntimes,omitempty"`

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Watcher tells Runtime Watcher which resource an operator watches in every
// SKR and which listener receives the events.
//
// Its schema accepts every Watcher that Lifecycle Manager's CRD accepts
// (docs/crd-versions.md); what vs-controller cannot use is reported in the
// status, not refused at admission.
//
// +kubebuilder:object:root=true
// +kubebuilder:storageversion
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Manager",type=string,JSONPath=`.spec.manager`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Watcher struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is optional in the schema, as in Lifecycle Manager's; a Watcher
	// without one is reported in its status.
	// +optional
	Spec   WatcherSpec   `json:"spec"`
	Status WatcherStatus `json:"status,omitempty"`
}

// ManagerName is spec.manager, or the managed-by label when it is empty.
func (w *Watcher) ManagerName() string {
	if w.Spec.Manager != "" {
		return w.Spec.Manager
	}
	return w.Labels[contract.LabelManagedBy]
}

// SpecProblems lists, in a fixed order, every reason why the Watcher can
// be neither routed in the KCP nor watched in the SKRs; none when it is
// usable. The CRD accepts what Lifecycle Manager's accepts, so these checks
// are not in the schema: vs-controller reports them in the status.
func (w *Watcher) SpecProblems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	switch label := w.Labels[contract.LabelManagedBy]; {
	case w.Spec.Manager != "":
		if errs := validation.IsDNS1123Label(w.Spec.Manager); len(errs) > 0 {
			add("spec.manager %q is not a DNS-1123 label: %s", w.Spec.Manager, strings.Join(errs, "; "))
		}
	case label == "":
		add("no manager name: spec.manager and the label %s are both empty", contract.LabelManagedBy)
	default:
		if errs := validation.IsDNS1123Label(label); len(errs) > 0 {
			add("label %s %q (used as spec.manager is empty) is not a DNS-1123 label: %s",
				contract.LabelManagedBy, label, strings.Join(errs, "; "))
		}
	}
	si := w.Spec.ServiceInfo
	if si.Name == "" {
		add("spec.serviceInfo.name is empty")
	} else if errs := validation.IsDNS1035Label(si.Name); len(errs) > 0 {
		add("spec.serviceInfo.name %q is not a Service name: %s", si.Name, strings.Join(errs, "; "))
	}
	if si.Namespace == "" {
		add("spec.serviceInfo.namespace is empty")
	} else if errs := validation.IsDNS1123Label(si.Namespace); len(errs) > 0 {
		add("spec.serviceInfo.namespace %q is not a namespace name: %s", si.Namespace, strings.Join(errs, "; "))
	}
	if si.Port < 1 || si.Port > 65535 {
		add("spec.serviceInfo.port %d is not in 1..65535", si.Port)
	}
	if w.Spec.Field != SpecField && w.Spec.Field != StatusField {
		add("spec.field %q is neither %q nor %q", w.Spec.Field, SpecField, StatusField)
	}
	if w.Spec.ResourceToWatch.Resource == "" {
		add("spec.resourceToWatch.resource is empty")
	}
	if w.Spec.ResourceToWatch.Version == "" {
		add("spec.resourceToWatch.version is empty")
	}
	if _, err := labels.ValidatedSelectorFromSet(w.Spec.LabelsToWatch); err != nil {
		add("spec.labelsToWatch is not a label selector: %v", err)
	}
	if _, err := metav1.LabelSelectorAsSelector(&w.Spec.Gateway.LabelSelector); err != nil {
		add("spec.gateway.selector: %v", err)
	}
	return out
}

// WebhookName is the name of this Watcher's webhook in the SKR's
// ValidatingWebhookConfiguration: <namespace>.<name>.operator.kyma-project.io.
func (w *Watcher) WebhookName() string {
	return w.Namespace + "." + w.Name + "." + GroupVersion.Group
}

// +kubebuilder:object:root=true

// WatcherList is a list of Watchers.
type WatcherList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Watcher `json:"items"`
}
