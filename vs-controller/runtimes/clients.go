package runtimes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// MaxKubeconfigBytes bounds a runtime's kubeconfig.
const MaxKubeconfigBytes = 256 << 10

// ClusterClients gives the client of a runtime's cluster.
type ClusterClients interface {
	// For returns a client for the cluster the kubeconfig points to; key
	// names the runtime (a cached client is reused while the kubeconfig
	// stays the same).
	For(ctx context.Context, key string, kubeconfig []byte) (client.Client, error)
	// Forget drops the runtime's cached client.
	Forget(key string)
}

// KubeconfigClients builds and caches one client per runtime, keyed by the
// runtime and the kubeconfig's content. Clients have a short timeout so an
// unreachable runtime fails fast instead of holding a worker, know only the
// bundle's kinds (no discovery requests) and refuse kubeconfigs that would
// run commands or read local files in the controller.
type KubeconfigClients struct {
	// Timeout of every request; 10s when 0.
	Timeout time.Duration
	// QPS and Burst of each runtime's client (client-go defaults when 0).
	QPS   float32
	Burst int
	// WrapTransport, when set, wraps every runtime client's transport
	// (metrics, tests).
	WrapTransport transport.WrapperFunc

	mu      sync.Mutex
	clients map[string]cachedClient
}

type cachedClient struct {
	sum    [sha256.Size]byte
	client client.Client
}

var _ ClusterClients = (*KubeconfigClients)(nil)

// For implements ClusterClients.
func (k *KubeconfigClients) For(_ context.Context, key string, kubeconfig []byte) (client.Client, error) {
	sum := sha256.Sum256(kubeconfig)
	k.mu.Lock()
	if c, ok := k.clients[key]; ok && c.sum == sum {
		k.mu.Unlock()
		return c.client, nil
	}
	k.mu.Unlock()

	cfg, err := RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.Timeout = k.Timeout
	if cfg.Timeout == 0 {
		cfg.Timeout = 10 * time.Second
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	cfg.UserAgent = "vs-controller"
	if k.WrapTransport != nil {
		cfg.Wrap(k.WrapTransport)
	}
	c, err := client.New(cfg, client.Options{Scheme: skrScheme, Mapper: skrMapper})
	if err != nil {
		return nil, fmt.Errorf("client for runtime cluster: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.clients == nil {
		k.clients = map[string]cachedClient{}
	}
	k.clients[key] = cachedClient{sum: sum, client: c}
	return c, nil
}

// Forget implements ClusterClients.
func (k *KubeconfigClients) Forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.clients, key)
}

// RESTConfig parses a runtime's kubeconfig (its current context). It fails
// closed on anything that would make the controller run a command
// (exec, auth-provider) or read its own files (certificate, key, token or
// CA file paths): a kubeconfig Secret is input, not code.
func RESTConfig(kubeconfig []byte) (*rest.Config, error) {
	if len(kubeconfig) == 0 {
		return nil, errors.New("empty kubeconfig")
	}
	if len(kubeconfig) > MaxKubeconfigBytes {
		return nil, fmt.Errorf("kubeconfig of %d bytes is over the limit of %d", len(kubeconfig), MaxKubeconfigBytes)
	}
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	for name, a := range raw.AuthInfos {
		switch {
		case a.Exec != nil:
			return nil, fmt.Errorf("kubeconfig user %q uses an exec plugin, which is not allowed", name)
		case a.AuthProvider != nil:
			return nil, fmt.Errorf("kubeconfig user %q uses an auth provider, which is not allowed", name)
		case a.ClientCertificate != "" || a.ClientKey != "" || a.TokenFile != "":
			return nil, fmt.Errorf("kubeconfig user %q refers to local files, which is not allowed", name)
		}
	}
	for name, c := range raw.Clusters {
		if c.CertificateAuthority != "" {
			return nil, fmt.Errorf("kubeconfig cluster %q refers to a local CA file, which is not allowed", name)
		}
	}
	cfg, err := clientcmd.NewDefaultClientConfig(*raw, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

// The kinds of the SKR bundle: a static scheme and REST mapper, so runtime
// clients never need discovery.
var (
	skrScheme = runtime.NewScheme()
	skrMapper = meta.NewDefaultRESTMapper(nil)
)

func init() {
	utilruntime.Must(corev1.AddToScheme(skrScheme))
	utilruntime.Must(appsv1.AddToScheme(skrScheme))
	utilruntime.Must(admissionregistrationv1.AddToScheme(skrScheme))
	skrMapper.Add(corev1.SchemeGroupVersion.WithKind("Namespace"), meta.RESTScopeRoot)
	skrMapper.Add(corev1.SchemeGroupVersion.WithKind("Secret"), meta.RESTScopeNamespace)
	skrMapper.Add(corev1.SchemeGroupVersion.WithKind("Service"), meta.RESTScopeNamespace)
	skrMapper.Add(appsv1.SchemeGroupVersion.WithKind("Deployment"), meta.RESTScopeNamespace)
	skrMapper.Add(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"), meta.RESTScopeRoot)
}
