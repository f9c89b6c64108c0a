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
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the old Watcher API.
	GroupVersion = schema.GroupVersion{Group: "operator.kyma-project.io", Version: "v1beta1"}

	// SchemeBuilder adds the v1beta1 Watcher types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the v1beta1 Watcher types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Watcher{}, &WatcherList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
