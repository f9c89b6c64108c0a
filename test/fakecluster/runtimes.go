package fakecluster

import (
	"context"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// Runtimes is a skrclient.ClusterClients of fake runtime clusters: For
// answers the cluster added for the key (a key with an impersonated user,
// "<key>\x00<user>", answers the cluster of <key>) and records the keys
// asked and forgotten. Safe for concurrent use.
type Runtimes struct {
	mu        sync.Mutex
	clusters  map[string]*Cluster
	errs      map[string]error
	asked     []string
	forgotten []string
	seen      map[string][]byte // key -> the kubeconfig For last got
}

var _ skrclient.ClusterClients = (*Runtimes)(nil)

// Add makes key's client c.
func (r *Runtimes) Add(key string, c *Cluster) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clusters == nil {
		r.clusters = map[string]*Cluster{}
	}
	r.clusters[key] = c
}

// Refuse makes For of key fail with err (as a kubeconfig skrclient
// refuses); nil undoes it.
func (r *Runtimes) Refuse(key string, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.errs == nil {
		r.errs = map[string]error{}
	}
	r.errs[key] = err
}

// For implements skrclient.ClusterClients.
func (r *Runtimes) For(_ context.Context, key string, kubeconfig []byte) (client.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.asked = append(r.asked, key)
	if r.seen == nil {
		r.seen = map[string][]byte{}
	}
	r.seen[key] = kubeconfig
	if len(kubeconfig) == 0 {
		return nil, fmt.Errorf("fakecluster: runtime %q: empty kubeconfig", key)
	}
	base, _, _ := strings.Cut(key, "\x00")
	if err := r.errs[base]; err != nil {
		return nil, err
	}
	c, ok := r.clusters[base]
	if !ok {
		return nil, fmt.Errorf("fakecluster: no runtime %q", base)
	}
	return c, nil
}

// Forget implements skrclient.ClusterClients.
func (r *Runtimes) Forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.forgotten = append(r.forgotten, key)
}

// Asked are the keys For was called with, in order.
func (r *Runtimes) Asked() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.asked...)
}

// KubeconfigOf is the kubeconfig For last got for key (nil: never asked).
func (r *Runtimes) KubeconfigOf(key string) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[key]
}

// Forgotten are the keys Forget was called with, in order.
func (r *Runtimes) Forgotten() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.forgotten...)
}

// Kubeconfig is a kubeconfig of a runtime at server (token auth), as a
// runtime's kubeconfig Secret holds it: one that skrclient.RESTConfig
// accepts.
func Kubeconfig(server string) []byte {
	return []byte(`apiVersion: v1
kind: Config
clusters:
- name: skr
  cluster:
    server: ` + server + `
    certificate-authority-data: ""
users:
- name: admin
  user:
    token: fake
contexts:
- name: skr
  context: {cluster: skr, user: admin}
current-context: skr
`)
}

// KubeconfigSecret is runtime runtimeID's kubeconfig Secret in namespace
// (skrclient's naming), labelled for vs-controller's cache when labelled.
func KubeconfigSecret(namespace, runtimeID string, labelled bool) *corev1.Secret {
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: skrclient.SecretName(runtimeID)},
		Data: map[string][]byte{skrclient.SecretKey: Kubeconfig("https://" + runtimeID + ".example:6443")}}
	if labelled {
		s.Labels = map[string]string{contract.LabelPartOf: contract.PartOf}
	}
	return s
}

// AddKyma registers the Kyma CR (operator.kyma-project.io/v1beta2 Kyma),
// which the project reads as metadata or unstructured only, with scheme.
func AddKyma(scheme *runtime.Scheme) {
	scheme.AddKnownTypeWithName(v1beta2.KymaGroupVersionKind, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(v1beta2.GroupVersion.WithKind("KymaList"), &unstructured.UnstructuredList{})
}

// Kyma is a Kyma CR: runtimeID "" leaves the runtime-id label out (the
// runtime ID is then the name), domain "" the skr-domain annotation.
func Kyma(namespace, name, runtimeID, domain string) *unstructured.Unstructured {
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	k.SetNamespace(namespace)
	k.SetName(name)
	k.SetUID(types.UID("uid-" + name))
	if runtimeID != "" {
		k.SetLabels(map[string]string{contract.LabelRuntimeID: runtimeID})
	}
	if domain != "" {
		k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
	}
	return k
}
