package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// State is the coarse state of a ModuleConfig or SyncResource, with the
// values Kyma's custom resources use, and Refused: a SyncResource that
// module-sync does not apply at all because no grant names its writer.
// +kubebuilder:validation:Enum=Ready;Processing;Error;Deleting;Warning;Refused
type State string

// States.
const (
	StateReady      State = "Ready"
	StateProcessing State = "Processing"
	StateError      State = "Error"
	StateDeleting   State = "Deleting"
	StateWarning    State = "Warning"
	// StateRefused: the SyncResource is inert (nothing of it is applied)
	// because the ModuleGrant of its module does not name the writer it
	// records; it applies again once a grant names that writer.
	StateRefused State = "Refused"
)

// LastOperation is the last thing module-sync did to an object and when.
type LastOperation struct {
	// Operation says what was done, in a sentence.
	Operation string `json:"operation"`
	// LastUpdateTime is when it was done.
	LastUpdateTime metav1.Time `json:"lastUpdateTime"`
}

// Status is the part of status that ModuleConfig and SyncResource share.
type Status struct {
	// State is the coarse state.
	// +optional
	State State `json:"state,omitempty"`
	// Conditions are the detailed states.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastOperation is the last thing module-sync did.
	// +optional
	LastOperation *LastOperation `json:"lastOperation,omitempty"`
	// ObservedGeneration is the metadata.generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}
