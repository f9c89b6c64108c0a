package bundle

// Adoption of a runtime that Kyma's Lifecycle Manager (LM) set up
// (docs/migrating-from-lifecycle-manager.md): what LM applies into an SKR
// and the "take-over" objects vs-controller brings up beside it. LM's
// objects are the ones in test/fixtures/lifecycle-manager/skr-bundle.

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

// Names and labels of Lifecycle Manager's SKR objects.
const (
	// LMManagedByLabel (the contract's managed-by label, also on Watchers)
	// and LMManagedByValue mark every object LM applies into an SKR (LM
	// finds them by kind and name, not by this label).
	LMManagedByLabel = contract.LabelManagedBy
	LMManagedByValue = "kyma"
	// LMMetricsServiceName, LMPriorityClassName: LM's objects that have no
	// counterpart in our bundle.
	LMMetricsServiceName = skr.LMMetricsServiceName
	LMPriorityClassName  = skr.LMPriorityClassName

	// TakeoverName is the Deployment vs-controller runs beside LM's
	// skr-webhook while it takes over (LM's Deployment selector is
	// immutable and differs from ours); TakeoverSecretName its Secret
	// (LM's skr-webhook-tls is Opaque, ours kubernetes.io/tls; type is
	// immutable). Both go once our skr-webhook Deployment is ready.
	TakeoverName       = skr.TakeoverName
	TakeoverSecretName = skr.TakeoverSecretName
	// TakeoverPodLabel marks the take-over pods (their Deployment's
	// selector); they also carry our pod labels, so the skr-webhook
	// Service sends to them.
	TakeoverPodLabel = "runtime-watcher.kyma-project.io/takeover"
)

// LMNetworkPolicyNames are LM's NetworkPolicies in the SKR.
var LMNetworkPolicyNames = skr.LMNetworkPolicyNames

// NetworkPolicyGVK: LM applies four, our bundle one (NetworkPolicyName);
// PriorityClassGVK: a kind only LM applies.
var (
	NetworkPolicyGVK = networkingv1.SchemeGroupVersion.WithKind("NetworkPolicy")
	PriorityClassGVK = schedulingv1.SchemeGroupVersion.WithKind("PriorityClass")
)

// LifecycleManagerObjects are the ten objects LM applies into an SKR, in
// the order they are removed after a take-over (the webhook configuration
// and the Service skr-webhook are not removed but taken over).
func LifecycleManagerObjects(o Options) []Ref {
	ns := o.namespace()
	refs := []Ref{
		{ValidatingWebhookConfigurationGVK, client.ObjectKey{Name: Name}},
		{ServiceGVK, client.ObjectKey{Namespace: ns, Name: Name}},
		{DeploymentGVK, client.ObjectKey{Namespace: ns, Name: Name}},
		{SecretGVK, client.ObjectKey{Namespace: ns, Name: SecretName}},
		{ServiceGVK, client.ObjectKey{Namespace: ns, Name: LMMetricsServiceName}},
		{PriorityClassGVK, client.ObjectKey{Name: LMPriorityClassName}},
	}
	for _, n := range LMNetworkPolicyNames {
		refs = append(refs, Ref{NetworkPolicyGVK, client.ObjectKey{Namespace: ns, Name: n}})
	}
	return refs
}

// IsLifecycleManagers tells whether an SKR object is LM's: it carries LM's
// managed-by label and not our hash annotation (an object we applied keeps
// LM's label until we strip it).
func IsLifecycleManagers(obj metav1.Object) bool {
	_, ours := obj.GetAnnotations()[diffapply.HashAnnotation]
	return !ours && obj.GetLabels()[LMManagedByLabel] == LMManagedByValue
}

// FindLifecycleManager reads LifecycleManagerObjects in the runtime and
// returns those that exist and are LM's.
func FindLifecycleManager(ctx context.Context, skr client.Reader, o Options) ([]Ref, error) {
	var found []Ref
	for _, ref := range LifecycleManagerObjects(o) {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(ref.GVK)
		switch err := skr.Get(ctx, ref.Key, obj); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, fmt.Errorf("read %s %s in the runtime: %w", ref.GVK.Kind, ref.Key, err)
		case IsLifecycleManagers(obj):
			found = append(found, ref)
		}
	}
	return found, nil
}

// TakeoverSecret is the runtime's certificate under TakeoverSecretName.
func TakeoverSecret(o Options, tls certificates.TLS) *corev1.Secret {
	s := Secret(o, tls.CA, tls.Cert, tls.Key)
	s.Name = TakeoverSecretName
	return s
}

// TakeoverDeployment is our skr-webhook Deployment named TakeoverName,
// mounting TakeoverSecretName, its pods also labelled TakeoverPodLabel
// (and selected by it).
func TakeoverDeployment(o Options) (*appsv1.Deployment, error) {
	d, err := Deployment(o)
	if err != nil {
		return nil, err
	}
	d.Name = TakeoverName
	sel := map[string]string{TakeoverPodLabel: "true"}
	for k, v := range d.Spec.Selector.MatchLabels {
		sel[k] = v
	}
	d.Spec.Selector = &metav1.LabelSelector{MatchLabels: sel}
	labels := map[string]string{}
	for k, v := range d.Spec.Template.Labels {
		labels[k] = v
	}
	labels[TakeoverPodLabel] = "true"
	d.Spec.Template.Labels = labels
	found := false
	for i := range d.Spec.Template.Spec.Volumes {
		if s := d.Spec.Template.Spec.Volumes[i].Secret; s != nil && s.SecretName == SecretName {
			s.SecretName, found = TakeoverSecretName, true
		}
	}
	if !found {
		return nil, fmt.Errorf("manifests/skr/deployment.yaml mounts no Secret %q", SecretName)
	}
	return d, nil
}

// TakeoverRemoval names the take-over objects, removed once our
// skr-webhook Deployment is ready, or when the runtime leaves.
func TakeoverRemoval(o Options) []Ref {
	ns := o.namespace()
	return []Ref{
		{DeploymentGVK, client.ObjectKey{Namespace: ns, Name: TakeoverName}},
		{SecretGVK, client.ObjectKey{Namespace: ns, Name: TakeoverSecretName}},
	}
}
