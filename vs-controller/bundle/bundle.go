// Package bundle builds the objects vs-controller applies into every runtime
// (SKR) cluster (docs/architecture.md §4.3): the namespace, the Secret
// skr-webhook-tls, the skr-webhook Deployment, Service, PodDisruptionBudget
// and NetworkPolicy (rendered from the kustomize base in manifests/skr), and the ValidatingWebhookConfiguration
// skr-webhook with one webhook per Watcher CR.
//
// Desired gives the whole bundle in apply order, WebhookConfigurations
// builds the webhook configuration once per set of Watchers and CA, Removal
// names what goes when a runtime leaves, Kinds and Scheme are what a runtime
// client must know. It only builds objects; writing them is the runtime
// reconciler's job (package runtimes).
package bundle

import (
	"bytes"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

// Names of the SKR objects (docs/architecture.md §4.3).
const (
	// Name of the Deployment, Service and ValidatingWebhookConfiguration.
	Name = skr.WebhookName
	// SecretName is the Secret holding ca.crt, tls.crt and tls.key.
	SecretName = skr.SecretName
	// DefaultNamespace is the SKR namespace of the bundle.
	DefaultNamespace = "kyma-system"
	// ServicePort is the port of the skr-webhook Service.
	ServicePort = 443
	// DefaultTimeoutSeconds bounds each admission call of the SKR API server.
	DefaultTimeoutSeconds = 3

	containerName = "skr-webhook"
	kcpAddrFlag   = "--kcp-addr="
	minTLSFlag    = "--min-tls-version="
)

// Options shape the bundle.
type Options struct {
	// Namespace in the SKR; DefaultNamespace when empty.
	Namespace string
	// Image of the skr-webhook; the image in manifests/skr when empty.
	Image string
	// KCPAddr is the KCP gateway host the webhook posts events to (its
	// --kcp-addr); the placeholder in manifests/skr when empty.
	KCPAddr string
	// MinTLSVersion is the webhook's --min-tls-version towards the KCP
	// gateway ("1.2" or "1.3"); the value in manifests/skr when empty.
	MinTLSVersion string
	// WebhookURL, when set, makes the webhooks call URL+/validate/<manager>
	// instead of the Service. A LOCAL/testing aid for SKR API servers that
	// cannot reach Services (the skr-webhook runs as a local process).
	WebhookURL string
	// TimeoutSeconds of each webhook; DefaultTimeoutSeconds when 0.
	TimeoutSeconds int32
	// WebhookIngressFrom are the sources the NetworkPolicy admits to the
	// webhook's admission port (ParseIngressFrom); any source when empty.
	WebhookIngressFrom []networkingv1.NetworkPolicyPeer
}

func (o Options) namespace() string {
	if o.Namespace == "" {
		return DefaultNamespace
	}
	return o.Namespace
}

// ServiceDNSNames are the names the webhook's serving certificate must
// carry: skr-webhook.<ns>.svc and skr-webhook.<ns>.svc.cluster.local.
func (o Options) ServiceDNSNames() []string {
	ns := o.namespace()
	return []string{Name + "." + ns + ".svc", Name + "." + ns + ".svc.cluster.local"}
}

// Namespace is the SKR namespace of the bundle.
func Namespace(o Options) (*corev1.Namespace, error) {
	ns := &corev1.Namespace{}
	if err := decode(skr.Namespace, ns); err != nil {
		return nil, err
	}
	ns.Name = o.namespace()
	return ns, nil
}

// Secret is skr-webhook-tls with the runtime's certificate.
func Secret(o Options, caCrt, tlsCrt, tlsKey []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: SecretName, Namespace: o.namespace()},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{certificates.KeyCA: caCrt, certificates.KeyCert: tlsCrt, certificates.KeyKey: tlsKey},
	}
}

// Service is manifests/skr/service.yaml in the bundle's namespace.
func Service(o Options) (*corev1.Service, error) {
	svc := &corev1.Service{}
	if err := decode(skr.Service, svc); err != nil {
		return nil, err
	}
	svc.Namespace = o.namespace()
	return svc, nil
}

// Deployment is manifests/skr/deployment.yaml in the bundle's namespace
// with the image, --kcp-addr and --min-tls-version from o.
func Deployment(o Options) (*appsv1.Deployment, error) {
	d := &appsv1.Deployment{}
	if err := decode(skr.Deployment, d); err != nil {
		return nil, err
	}
	d.Namespace = o.namespace()
	var c *corev1.Container
	for i := range d.Spec.Template.Spec.Containers {
		if d.Spec.Template.Spec.Containers[i].Name == containerName {
			c = &d.Spec.Template.Spec.Containers[i]
		}
	}
	if c == nil {
		return nil, fmt.Errorf("manifests/skr/deployment.yaml has no container %q", containerName)
	}
	if o.Image != "" {
		c.Image = o.Image
	}
	setArg(c, kcpAddrFlag, o.KCPAddr)
	setArg(c, minTLSFlag, o.MinTLSVersion)
	return d, nil
}

// setArg sets the container's flag (prefix "--name=") to value, replacing
// it where present; nothing when value is empty.
func setArg(c *corev1.Container, prefix, value string) {
	if value == "" {
		return
	}
	for i, a := range c.Args {
		if strings.HasPrefix(a, prefix) {
			c.Args[i] = prefix + value
			return
		}
	}
	c.Args = append(c.Args, prefix+value)
}

// WebhookConfiguration is the ValidatingWebhookConfiguration skr-webhook
// with one webhook per usable Watcher, sorted by webhook name. Watchers
// being deleted or without a valid manager name are left out.
func WebhookConfiguration(o Options, watchers []v1beta2.Watcher, caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	hooks := make([]admissionregistrationv1.ValidatingWebhook, 0, len(watchers))
	for _, w := range Webhooked(watchers) {
		hooks = append(hooks, Webhook(o, w, caBundle))
	}
	sort.Slice(hooks, func(i, j int) bool { return hooks[i].Name < hooks[j].Name })
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: Name},
		Webhooks:   hooks,
	}
}

// Usable reports whether a Watcher gets a webhook: it is not being deleted
// and its spec has no problems (v1beta2.Watcher.SpecProblems: the CRD accepts
// what Lifecycle Manager's accepts, e.g. an empty resource, which would make
// the whole ValidatingWebhookConfiguration invalid).
func Usable(w *v1beta2.Watcher) bool {
	return w.DeletionTimestamp == nil && len(w.SpecProblems()) == 0 &&
		len(validation.IsDNS1123Subdomain(w.WebhookName())) == 0
}

// Webhooked are the Watchers that get a webhook: the Usable ones that own
// their manager's route (docs/architecture.md §4.10). A Watcher owns it
// when no older Watcher of the same manager (being deleted or not) claims
// it — the rule of package routing, which alone knows the Gateways —, or
// when routing says it does (routeowner.HoldsRoute: its Gateways are not the
// older one's). A loser of a route conflict gets no webhook in any runtime:
// its rules would post to the owner's path.
func Webhooked(watchers []v1beta2.Watcher) []*v1beta2.Watcher {
	oldest := map[string]*v1beta2.Watcher{}
	for i := range watchers {
		w := &watchers[i]
		if len(w.SpecProblems()) > 0 {
			continue
		}
		if o, ok := oldest[w.ManagerName()]; !ok || routeowner.Older(w, o) {
			oldest[w.ManagerName()] = w
		}
	}
	out := make([]*v1beta2.Watcher, 0, len(watchers))
	for i := range watchers {
		w := &watchers[i]
		if Usable(w) && (oldest[w.ManagerName()] == w || routeowner.HoldsRoute(w)) {
			out = append(out, w)
		}
	}
	return out
}

// Webhook is a Watcher's webhook (docs/architecture.md §4.3).
func Webhook(o Options, w *v1beta2.Watcher, caBundle []byte) admissionregistrationv1.ValidatingWebhook {
	resource := w.Spec.ResourceToWatch.Resource
	if w.Spec.Field == v1beta2.StatusField {
		resource += "/status"
	}
	timeout := o.TimeoutSeconds
	if timeout == 0 {
		timeout = DefaultTimeoutSeconds
	}
	path := contract.ValidatePath(w.ManagerName())
	cc := admissionregistrationv1.WebhookClientConfig{CABundle: bytes.Clone(caBundle)}
	if o.WebhookURL != "" {
		cc.URL = ptr.To(strings.TrimSuffix(o.WebhookURL, "/") + path)
	} else {
		cc.Service = &admissionregistrationv1.ServiceReference{
			Name: Name, Namespace: o.namespace(), Path: ptr.To(path), Port: ptr.To[int32](ServicePort),
		}
	}
	hook := admissionregistrationv1.ValidatingWebhook{
		Name:         w.WebhookName(),
		ClientConfig: cc,
		Rules: []admissionregistrationv1.RuleWithOperations{{
			Operations: []admissionregistrationv1.OperationType{
				admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
			},
			Rule: admissionregistrationv1.Rule{
				APIGroups:   []string{w.Spec.ResourceToWatch.Group},
				APIVersions: []string{w.Spec.ResourceToWatch.Version},
				Resources:   []string{resource},
			},
		}},
		FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
		SideEffects:             ptr.To(admissionregistrationv1.SideEffectClassNoneOnDryRun),
		TimeoutSeconds:          ptr.To(timeout),
		AdmissionReviewVersions: []string{"v1"},
	}
	if len(w.Spec.LabelsToWatch) > 0 {
		hook.ObjectSelector = &metav1.LabelSelector{MatchLabels: w.Spec.LabelsToWatch}
	}
	return hook
}

func decode(data []byte, into any) error {
	if err := yaml.UnmarshalStrict(data, into); err != nil {
		return fmt.Errorf("decode manifests/skr: %w", err)
	}
	return nil
}
