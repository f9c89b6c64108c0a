// Package v1beta1 is the Watcher API's old version, kept only as an entry of
// the CRD: not served and not stored (like Lifecycle Manager's), so that the
// CRD can replace Lifecycle Manager's on a cluster whose
// status.storedVersions still lists v1beta1 — the API server refuses a CRD
// update that drops a version still in storedVersions. Nothing reads or
// writes v1beta1 objects; docs/crd-versions.md describes the storage
// migration after which it could be dropped.
//
// +kubebuilder:object:generate=true
// +groupName=operator.kyma-project.io
package v1beta1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the old Watcher API.
	GroupVersion = schema.GroupVersion{Group: "operator.kyma-project.io", Version: "v1beta1"}

	// SchemeBuilder adds the v1beta1 Watcher types to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the v1beta1 Watcher types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
