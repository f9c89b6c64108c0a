package v1beta1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// WatcherSpec is v1beta2's without spec.manager, as in Lifecycle Manager's
// v1beta1 (the manager came from the label
// operator.kyma-project.io/managed-by).
type WatcherSpec struct {
	// ServiceInfo is the operator's listener Service in the KCP.
	ServiceInfo v1beta2.Service `json:"serviceInfo"`

	// LabelsToWatch restricts the watched objects to those with these labels.
	// +optional
	LabelsToWatch map[string]string `json:"labelsToWatch,omitempty"`

	// ResourceToWatch is the resource watched in every SKR.
	ResourceToWatch v1beta2.WatchableGVR `json:"resourceToWatch"`

	// Field is the part of the object whose changes emit events.
	Field v1beta2.FieldName `json:"field"`

	// Gateway selects the Istio Gateways the events arrive through.
	Gateway v1beta2.GatewayConfig `json:"gateway"`
}

// Watcher is the deprecated, unserved v1beta1 of the Watcher API.
//
// +kubebuilder:object:root=true
// +kubebuilder:unservedversion
// +kubebuilder:deprecatedversion:warning="kyma-project.io/v1beta1 Watcher is deprecated. Use v1beta2 instead."
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Watcher struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Spec   WatcherSpec           `json:"spec"`
	Status v1beta2.WatcherStatus `json:"status,omitempty"`
}

// +kubebuilder:object:root=true

// WatcherList is a list of v1beta1 Watchers.
type WatcherList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Watcher `json:"items"`
}
