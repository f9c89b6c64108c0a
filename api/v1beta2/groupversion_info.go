// Package v1beta2 holds the Watcher API (group operator.kyma-project.io),
// compatible with Kyma Lifecycle Manager's Watcher CRD (docs/architecture.md §4.2).
//
// +kubebuilder:object:generate=true
// +groupName=operator.kyma-project.io
package v1beta2

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the Watcher API.
	GroupVersion = schema.GroupVersion{Group: "operator.kyma-project.io", Version: "v1beta2"}

	// SchemeBuilder adds the Watcher types to a scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the Watcher types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

// KymaGroupVersionKind identifies Lifecycle Manager's Kyma CR. Runtime
// Watcher reads only its metadata (name, labels, skr-domain annotation).
var KymaGroupVersionKind = GroupVersion.WithKind("Kyma")
