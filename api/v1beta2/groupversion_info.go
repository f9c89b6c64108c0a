// Package v1beta2 holds the Watcher API (group operator.kyma-project.io),
// compatible with Kyma Lifecycle Manager's Watcher CRD (docs/architecture.md §4.2).
//
// +kubebuilder:object:generate=true
// +groupName=operator.kyma-project.io
package v1beta2

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

var (
	// GroupVersion is the group and version of the Watcher API.
	GroupVersion = schema.GroupVersion{Group: "operator.kyma-project.io", Version: "v1beta2"}

	// SchemeBuilder adds the Watcher types to a scheme.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)

	// AddToScheme adds the Watcher types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Watcher{}, &WatcherList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// KymaGroupVersionKind identifies Lifecycle Manager's Kyma CR. Runtime
// Watcher reads only its metadata (name, labels, skr-domain annotation).
var KymaGroupVersionKind = GroupVersion.WithKind("Kyma")
