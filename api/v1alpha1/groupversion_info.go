// Package v1alpha1 holds the module resource sync API (group
// operator.kyma-project.io, docs/architecture.md §4.11): ModuleConfig, the KCP
// mirror of a Module CR in a runtime, SyncResource, the objects a module
// manager wants in a runtime, and ModuleGrant, what a module may write in
// the runtimes (docs/security.md). The shapes follow Kyma's ADRs "KCP
// ModuleConfig" and "KCP SyncResource".
//
// Module teams import this package into their module managers, so it depends
// on k8s.io/apimachinery only (no controller-runtime; deps_test.go checks).
//
// +kubebuilder:object:generate=true
// +groupName=operator.kyma-project.io
package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the module resource sync API.
	GroupVersion = schema.GroupVersion{Group: "operator.kyma-project.io", Version: "v1alpha1"}

	// SchemeBuilder adds the module resource sync types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the module resource sync types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&ModuleConfig{}, &ModuleConfigList{},
		&SyncResource{}, &SyncResourceList{},
		&ModuleGrant{}, &ModuleGrantList{},
	)
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}
