package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

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
// +kubebuilder:validation:Enum=Ready;Processing;Error;Deleting;Warning
type State string

// Watcher states.
const (
	StateReady      State = "Ready"
	StateProcessing State = "Processing"
	StateError      State = "Error"
	StateDeleting   State = "Deleting"
	StateWarning    State = "Warning"
)

// Service names the in-cluster Service of the operator's listener.
type Service struct {
	// Name of the Service.
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// Namespace of the Service.
	// +kubebuilder:validation:MinLength=1
	Namespace string `json:"namespace"`
	// Port of the listener on the Service.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int64 `json:"port"`
}

// WatchableGVR names the resource the SKR webhook watches.
type WatchableGVR struct {
	// Group of the resource; empty for the core group.
	Group string `json:"group"`
	// Version of the resource; "*" matches every version.
	// +kubebuilder:validation:MinLength=1
	Version string `json:"version"`
	// Resource is the plural resource name, e.g. "kymas".
	// +kubebuilder:validation:MinLength=1
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
	// operator.kyma-project.io/managed-by is used.
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	// +kubebuilder:validation:MaxLength=63
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

	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// Watcher tells Runtime Watcher which resource an operator watches in every
// SKR and which listener receives the events.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=`.status.state`
// +kubebuilder:printcolumn:name="Manager",type=string,JSONPath=`.spec.manager`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Watcher struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

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

func init() {
	SchemeBuilder.Register(&Watcher{}, &WatcherList{})
}
