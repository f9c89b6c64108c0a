package bundle

import (
	"crypto/sha256"
	"fmt"
	"sort"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

// The kinds of the bundle.
var (
	NamespaceGVK                      = corev1.SchemeGroupVersion.WithKind("Namespace")
	SecretGVK                         = corev1.SchemeGroupVersion.WithKind("Secret")
	ServiceGVK                        = corev1.SchemeGroupVersion.WithKind("Service")
	DeploymentGVK                     = appsv1.SchemeGroupVersion.WithKind("Deployment")
	ConfigMapGVK                      = corev1.SchemeGroupVersion.WithKind("ConfigMap")
	PodDisruptionBudgetGVK            = policyv1.SchemeGroupVersion.WithKind("PodDisruptionBudget")
	ValidatingWebhookConfigurationGVK = admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration")
)

// Kinds are the bundle's kinds, true for the cluster-scoped ones: all a
// runtime client of vs-controller needs to know.
func Kinds() map[schema.GroupVersionKind]bool {
	return map[schema.GroupVersionKind]bool{
		NamespaceGVK: true, SecretGVK: false, ServiceGVK: false, DeploymentGVK: false,
		ConfigMapGVK: false, PodDisruptionBudgetGVK: false, NetworkPolicyGVK: false,
		ValidatingWebhookConfigurationGVK: true,
		// Lifecycle Manager's kind, read and deleted by the take-over.
		PriorityClassGVK: true,
	}
}

// Scheme has the bundle's kinds.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(corev1.AddToScheme(s))
	utilruntime.Must(appsv1.AddToScheme(s))
	utilruntime.Must(policyv1.AddToScheme(s))
	utilruntime.Must(admissionregistrationv1.AddToScheme(s))
	utilruntime.Must(networkingv1.AddToScheme(s))
	utilruntime.Must(schedulingv1.AddToScheme(s))
	return s
}

// Desired is the bundle in apply order (namespace, Secret, the managers
// ConfigMap of watchers, NetworkPolicy — before the pods it confines —,
// Service, Deployment, PodDisruptionBudget, then webhooks, the webhook
// configuration from WebhookConfigurations), each with apply's hash
// annotation.
func Desired(o Options, tls certificates.TLS, watchers []v1beta2.Watcher, webhooks *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	ns, err := Namespace(o)
	if err != nil {
		return nil, err
	}
	svc, err := Service(o)
	if err != nil {
		return nil, err
	}
	dep, err := Deployment(o)
	if err != nil {
		return nil, err
	}
	pdb, err := PodDisruptionBudget(o)
	if err != nil {
		return nil, err
	}
	np, err := NetworkPolicy(o)
	if err != nil {
		return nil, err
	}
	objs := []struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		{ns, NamespaceGVK},
		{Secret(o, tls.CA, tls.Cert, tls.Key), SecretGVK},
		{ManagersConfigMap(o, watchers), ConfigMapGVK},
		{np, NetworkPolicyGVK},
		{svc, ServiceGVK},
		{dep, DeploymentGVK},
		{pdb, PodDisruptionBudgetGVK},
	}
	out := make([]*unstructured.Unstructured, 0, len(objs)+1)
	for _, obj := range objs {
		u, err := diffapply.Desired(obj.obj, obj.gvk)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return append(out, webhooks), nil
}

// watchersKey fingerprints what of a set of Watchers the bundle is built
// from (spec by generation, managed-by label, deletion, whether routing
// says it holds its route), and extra.
func watchersKey(watchers []v1beta2.Watcher, extra []byte) string {
	// Lists come in no particular order: fingerprint a sorted list.
	lines := make([]string, 0, len(watchers))
	for i := range watchers {
		w := &watchers[i]
		lines = append(lines, fmt.Sprintf("%s/%s/%s/%d/%s/%t/%t", w.Namespace, w.Name, w.UID, w.Generation, w.Labels[contract.LabelManagedBy], w.DeletionTimestamp != nil, routeowner.HoldsRoute(w)))
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	h.Write(extra)
	return string(h.Sum(nil))
}

// Bundles is Desired with the objects all runtimes share (namespace,
// managers ConfigMap, Service, Deployment, PodDisruptionBudget) built once
// per set of Watchers; a call builds only the runtime's Secret. Building
// them (the kustomize base decoded from YAML, every Watcher checked for the
// managers list) was 2.3 ms of CPU per runtime pass with 100 Watchers. The
// zero value is ready to use and safe for concurrent use; the shared
// objects must not be modified, and o must be the same in every call.
type Bundles struct {
	mu     sync.Mutex
	key    string
	shared []*unstructured.Unstructured // Desired's order without the Secret and webhooks
}

// Desired is Desired(o, tls, watchers, webhooks).
func (c *Bundles) Desired(o Options, tls certificates.TLS, watchers []v1beta2.Watcher, webhooks *unstructured.Unstructured) ([]*unstructured.Unstructured, error) {
	key := watchersKey(watchers, nil)
	c.mu.Lock()
	shared := c.shared
	if c.key != key {
		shared = nil
	}
	c.mu.Unlock()
	if shared == nil {
		all, err := Desired(o, tls, watchers, webhooks)
		if err != nil {
			return nil, err
		}
		shared = append([]*unstructured.Unstructured{all[0]}, all[2:len(all)-1]...)
		c.mu.Lock()
		c.key, c.shared = key, shared
		c.mu.Unlock()
		return all, nil
	}
	secret, err := diffapply.Desired(Secret(o, tls.CA, tls.Cert, tls.Key), SecretGVK)
	if err != nil {
		return nil, err
	}
	out := make([]*unstructured.Unstructured, 0, len(shared)+2)
	out = append(out, shared[0], secret)
	out = append(out, shared[1:]...)
	return append(out, webhooks), nil
}

// Ref names one bundle object in a runtime.
type Ref struct {
	GVK schema.GroupVersionKind
	Key client.ObjectKey
}

// Removal lists the bundle objects to delete when a runtime leaves, in
// order: the webhook configuration first so the API server stops calling,
// then the Deployment, its PodDisruptionBudget and NetworkPolicy (once its
// pods are going), the Service, the managers ConfigMap and the Secret. The
// namespace is not listed (it is shared).
func Removal(o Options) []Ref {
	ns := o.namespace()
	return []Ref{
		{ValidatingWebhookConfigurationGVK, client.ObjectKey{Name: Name}},
		{DeploymentGVK, client.ObjectKey{Namespace: ns, Name: Name}},
		{PodDisruptionBudgetGVK, client.ObjectKey{Namespace: ns, Name: Name}},
		{NetworkPolicyGVK, client.ObjectKey{Namespace: ns, Name: NetworkPolicyName}},
		{ServiceGVK, client.ObjectKey{Namespace: ns, Name: Name}},
		{ConfigMapGVK, client.ObjectKey{Namespace: ns, Name: ManagersConfigMapName}},
		{SecretGVK, client.ObjectKey{Namespace: ns, Name: SecretName}},
	}
}

// maxCachedWebhookConfigs bounds the cache of built webhook configurations
// (one per CA in use).
const maxCachedWebhookConfigs = 16

// WebhookConfigurations builds the webhook configuration of a set of
// Watchers and a CA once: runtimes signed by the same issuer share it. The
// zero value is ready to use and safe for concurrent use.
type WebhookConfigurations struct {
	mu    sync.Mutex
	cache map[string]*unstructured.Unstructured
}

// Desired is WebhookConfiguration(o, watchers, caBundle) with apply's hash
// annotation. The result is shared and must not be modified. o must be the
// same in every call.
func (c *WebhookConfigurations) Desired(o Options, watchers []v1beta2.Watcher, caBundle []byte) (*unstructured.Unstructured, error) {
	key := watchersKey(watchers, caBundle)

	c.mu.Lock()
	if u, ok := c.cache[key]; ok {
		c.mu.Unlock()
		return u, nil
	}
	c.mu.Unlock()

	u, err := diffapply.Desired(WebhookConfiguration(o, watchers, caBundle), ValidatingWebhookConfigurationGVK)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cache == nil || len(c.cache) >= maxCachedWebhookConfigs {
		c.cache = map[string]*unstructured.Unstructured{}
	}
	c.cache[key] = u
	return u, nil
}
