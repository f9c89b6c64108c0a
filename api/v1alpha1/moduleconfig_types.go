package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// ModuleConfigSpec is the mirror of one Module CR in one runtime.
type ModuleConfigSpec struct {
	// Kyma is the name of the Kyma CR (in this namespace) of the runtime.
	// +kubebuilder:validation:MinLength=1
	Kyma string `json:"kyma"`
	// Module is the name of the module.
	// +kubebuilder:validation:MinLength=1
	Module string `json:"module"`
	// Resource is the Module CR as it is in the runtime, trimmed to
	// apiVersion, kind, metadata (name, namespace, generation, labels) and
	// spec.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:EmbeddedResource
	Resource runtime.RawExtension `json:"resource"`
}

// ModuleConfigStatus is written by module-sync.
type ModuleConfigStatus struct {
	Status `json:",inline"`
}

// ModuleConfig mirrors a Module CR of a runtime into the KCP. module-sync
// writes it; module managers only read it.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=mc
// +kubebuilder:printcolumn:name="Kyma",type=string,JSONPath=".spec.kyma"
// +kubebuilder:printcolumn:name="Module",type=string,JSONPath=".spec.module"
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=".status.state"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ModuleConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   ModuleConfigSpec   `json:"spec"`
	Status ModuleConfigStatus `json:"status,omitempty"`
}

// ModuleConfigList is a list of ModuleConfigs.
//
// +kubebuilder:object:root=true
type ModuleConfigList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModuleConfig `json:"items"`
}
