package v1alpha1

import metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

// GrantedKind names a kind in the runtime: its API group ("" for the core
// group) and kind. There are no wildcards: every kind is named.
type GrantedKind struct {
	// Group of the kind; "" is the core group.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Group string `json:"group"`
	// Kind, e.g. ConfigMap.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Kind string `json:"kind"`
}

// ModuleGrantSpec is what a module's SyncResources may write in every
// runtime, and who manages the module in the KCP.
//
// +kubebuilder:validation:XValidation:rule="!has(self.namespaces) || self.namespaces.all(n, !n.startsWith('kube-'))",message="kube-system, kube-public and kube-node-lease are never granted"
type ModuleGrantSpec struct {
	// Managers are the KCP users (e.g.
	// system:serviceaccount:<namespace>:<name>) of the module's manager.
	// The ValidatingAdmissionPolicy in manifests/kcp lets them create,
	// change and delete SyncResources of this module only.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Managers []string `json:"managers,omitempty"`
	// Kinds are the namespaced kinds the module may write, in Namespaces
	// only.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Kinds []GrantedKind `json:"kinds,omitempty"`
	// Namespaces of the runtime in which Kinds may be written.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=set
	Namespaces []string `json:"namespaces,omitempty"`
	// ClusterScopedKinds are the cluster-scoped kinds the module may write
	// (none by default). Name RBAC, admission or CRD kinds here only for a
	// module that is trusted with the whole runtime.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ClusterScopedKinds []GrantedKind `json:"clusterScopedKinds,omitempty"`
	// Workloads is what the module's Pods, and the pod templates of the
	// kinds that make Pods, may use in the runtime. Without it they may
	// use only ServiceAccounts the module created through module-sync, no
	// Secret, no host namespace, port or path, and no privilege. The
	// runtime's own admission enforces it (docs/security.md).
	// +optional
	Workloads *WorkloadGrant `json:"workloads,omitempty"`
}

// WorkloadGrant is what a module's workloads may use beyond their own
// objects. Names of the watcher's bundle are never granted, whatever this
// says.
type WorkloadGrant struct {
	// Secrets the module's workloads may mount or read (volumes,
	// environment, image pull secrets), by name, in the granted namespaces.
	// module-sync never writes Secrets: these are the runtime's own.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Secrets []string `json:"secrets,omitempty"`
	// ServiceAccounts the module's workloads may run as, by name, in the
	// granted namespaces, besides those the module created through
	// module-sync.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	ServiceAccounts []string `json:"serviceAccounts,omitempty"`
	// HostAccess lets the module's workloads use the host's network, PID
	// or IPC namespace, host ports and hostPath volumes.
	// +optional
	HostAccess bool `json:"hostAccess,omitempty"`
	// Privileged lets the module's workloads run privileged containers,
	// add capabilities other than NET_BIND_SERVICE and use volume types
	// other than configMap, secret, projected, emptyDir, downwardAPI,
	// persistentVolumeClaim, ephemeral and image.
	// +optional
	Privileged bool `json:"privileged,omitempty"`
}

// ModuleGrant is the platform's grant to one module (its name is the
// module's name): what the module's SyncResources may write in the
// runtimes. Whoever installs the module writes it in the Kyma namespace;
// module managers may not (they only read it). A module without a
// ModuleGrant may write nothing.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Namespaced,shortName=mg
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=".metadata.creationTimestamp"
type ModuleGrant struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec ModuleGrantSpec `json:"spec"`
}

// ModuleGrantList is a list of ModuleGrants.
//
// +kubebuilder:object:root=true
type ModuleGrantList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ModuleGrant `json:"items"`
}
