package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Strategy says how module-sync treats an item's object in the runtime.
// +kubebuilder:validation:Enum=CreateAndSync;CreateAndIgnore;Delete
type Strategy string

// Strategies.
const (
	// CreateAndSync applies the object with server-side apply (field
	// manager module-sync, forced) on every pass: drift is corrected.
	CreateAndSync Strategy = "CreateAndSync"
	// CreateAndIgnore creates the object when it is absent and never
	// touches it again.
	CreateAndIgnore Strategy = "CreateAndIgnore"
	// Delete makes sure the object is absent.
	Delete Strategy = "Delete"
)

// SyncItem is one object to have (or not have) in the runtime.
type SyncItem struct {
	// Name identifies the item in the list and in status.items.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`
	// Strategy is CreateAndSync, CreateAndIgnore or Delete.
	Strategy Strategy `json:"strategy"`
	// Resource is the object: apiVersion, kind, metadata (name, namespace,
	// labels, annotations) and its content (spec, data, …); its status is
	// ignored. Secrets are refused.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:EmbeddedResource
	Resource runtime.RawExtension `json:"resource"`
	// Adopt lets a CreateAndSync item take over an object that exists in
	// the runtime and was not created by this SyncResource: module-sync
	// marks it as its own, applies it, and deletes it when the item leaves
	// the spec or the SyncResource is deleted. Without it such an item is
	// Refused and the object is left alone.
	// +optional
	Adopt bool `json:"adopt,omitempty"`
	// Subresource, when set, carries a status written to the object's
	// status subresource after the object (same apiVersion, kind and name
	// as resource; only its status is used).
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:EmbeddedResource
	Subresource *runtime.RawExtension `json:"subresource,omitempty"`
}

// SyncResourceSpec lists the objects a module manager wants in a runtime.
//
// +kubebuilder:validation:XValidation:rule="self.kyma == oldSelf.kyma",message="spec.kyma is immutable"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.module) || (has(self.module) && self.module == oldSelf.module)",message="spec.module is immutable"
type SyncResourceSpec struct {
	// Kyma is the name of the Kyma CR (in this namespace) of the runtime.
	// Immutable.
	// +kubebuilder:validation:MinLength=1
	Kyma string `json:"kyma"`
	// Module is the module the SyncResource belongs to: its ModuleGrant
	// (same name, this namespace) bounds what module-sync writes for it.
	// Without it nothing is written (every item is Refused). Immutable once
	// set.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Module string `json:"module,omitempty"`
	// Items are the objects, each with a unique name.
	// +optional
	// +listType=map
	// +listMapKey=name
	Items []SyncItem `json:"items,omitempty"`
}

// ItemState is the state of one item.
// +kubebuilder:validation:Enum=Ready;Error;Refused
type ItemState string

// Item states.
const (
	// ItemReady: the object is as the strategy wants it (applied, created
	// or present, or absent for Delete).
	ItemReady ItemState = "Ready"
	// ItemError: the item could not be applied (see message); it is
	// retried.
	ItemError ItemState = "Error"
	// ItemRefused: module-sync does not apply such an item (see message,
	// e.g. a Secret); it is not retried until the item changes.
	ItemRefused ItemState = "Refused"
)

// ObjectReference names an object in the runtime.
type ObjectReference struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// +optional
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// ItemStatus is the result of one item, and the inventory entry that lets
// module-sync remove the object when the item leaves the spec.
type ItemStatus struct {
	// Name of the item.
	Name string `json:"name"`
	// State of the item.
	State ItemState `json:"state"`
	// Message explains the state.
	// +optional
	Message string `json:"message,omitempty"`
	// Object is the object in the runtime that module-sync created or
	// applies for this item and removes when the item leaves the spec or
	// the SyncResource is deleted. Empty when module-sync owns nothing for
	// the item (Delete, refused, or CreateAndIgnore of an object that
	// existed before).
	// +optional
	Object *ObjectReference `json:"object,omitempty"`
}

// SyncResourceStatus is written by module-sync.
type SyncResourceStatus struct {
	Status `json:",inline"`
	// Items are the per-item results; an item removed from the spec stays
	// here until its object is gone from the runtime.
	// +optional
	// +listType=map
	// +listMapKey=name
	Items []ItemStatus `json:"items,omitempty"`
	// Replica is the module-sync replica (its --shard-identity, the pod's
	// name) that wrote this status: the owner of the Kyma's runtime when
	// it was written. Empty when module-sync does not shard.
	// +optional
	Replica string `json:"replica,omitempty"`
}

// AnnotationWrittenBy, on a SyncResource, names the KCP user who wrote its
// spec. The ValidatingAdmissionPolicy of
// manifests/kcp/base/syncresource-writer-policy.yaml keeps it true: whoever
// creates a SyncResource or changes its spec must set it to their own user
// name. module-sync applies a SyncResource only while the ModuleGrant of its
// module names that writer in spec.managers.
const AnnotationWrittenBy = "operator.kyma-project.io/written-by"

// SyncResource lists objects that module-sync applies to the runtime of a
// Kyma. Module managers write it; module-sync writes its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=sr
// +kubebuilder:printcolumn:name="Kyma",type=string,JSONPath=".spec.kyma"
// +kubebuilder:printcolumn:name="State",type=string,JSONPath=".status.state"
// +kubebuilder:printcolumn:name="Replica",type=string,JSONPath=".status.replica",priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type SyncResource struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SyncResourceSpec   `json:"spec"`
	Status SyncResourceStatus `json:"status,omitempty"`
}

// SyncResourceList is a list of SyncResources.
//
// +kubebuilder:object:root=true
type SyncResourceList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []SyncResource `json:"items"`
}
