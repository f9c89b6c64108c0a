// Package skrclient gives KCP components a client of a runtime's (SKR's)
// cluster: it reads the runtime's kubeconfig Secret (Lifecycle Manager's
// convention: Secret kubeconfig-<runtime-id>, key "config", in the Kyma
// namespace), refuses kubeconfigs that would run commands or read local
// files, and caches one controller-runtime client per runtime for as long
// as the kubeconfig stays the same.
//
// The caller chooses what the clients know: a scheme and a static REST
// mapper of the kinds it reads and writes in the runtimes, so no client
// ever sends discovery requests. vs-controller passes the kinds of its SKR
// bundle (package vs-controller/bundle). A caller that works with kinds it
// does not know beforehand (module-sync: unstructured objects of any CRD)
// sets NewMapper instead, e.g. to DynamicRESTMapper: one mapper per runtime,
// shared by the clients of the users it acts as there.
//
// Runtimes (runtimes.go) finds a runtime's client by its ID, optionally
// acting as another user in the runtime (impersonation): module-sync acts
// as each module's identity.
package skrclient

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/transport"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

const (
	// SecretPrefix + runtime ID names a runtime's kubeconfig Secret.
	SecretPrefix = "kubeconfig-"
	// SecretKey is the kubeconfig's key in that Secret.
	SecretKey = "config"
	// MaxKubeconfigBytes bounds a runtime's kubeconfig.
	MaxKubeconfigBytes = 256 << 10
	// DefaultTimeout of every request to a runtime.
	DefaultTimeout = 10 * time.Second
)

// SecretName is the name of a runtime's kubeconfig Secret.
func SecretName(runtimeID string) string { return SecretPrefix + runtimeID }

// RuntimeIDOfSecret is the runtime ID a kubeconfig Secret's name carries;
// false when the name is not a kubeconfig Secret's.
func RuntimeIDOfSecret(secretName string) (string, bool) {
	id, ok := strings.CutPrefix(secretName, SecretPrefix)
	return id, ok && id != ""
}

// Kubeconfig reads runtime runtimeID's kubeconfig from its Secret in
// namespace; nil without error when the Secret does not exist.
func Kubeconfig(ctx context.Context, c client.Reader, namespace, runtimeID string) ([]byte, error) {
	s := &corev1.Secret{}
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: SecretName(runtimeID)}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data[SecretKey], nil
}

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
// kinds of Scheme and Mapper (no discovery requests) and refuse kubeconfigs
// that would run commands or read local files in the controller.
type KubeconfigClients struct {
	// Scheme and Mapper of every runtime client (required): the kinds the
	// caller uses in the runtimes. Mapper should be static (e.g.
	// NewRESTMapper) so that no client sends discovery requests.
	Scheme *runtime.Scheme
	Mapper meta.RESTMapper
	// NewMapper, used when Mapper is nil, builds each runtime's own REST
	// mapper (e.g. DynamicRESTMapper, which sends discovery requests).
	NewMapper func(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error)
	// UserAgent of the requests; client-go's default when empty.
	UserAgent string
	// Timeout of every request; DefaultTimeout when 0.
	Timeout time.Duration
	// QPS and Burst of each runtime's client (client-go defaults when 0).
	QPS   float32
	Burst int
	// WrapTransport, when set, wraps every runtime client's transport
	// (metrics, tests).
	WrapTransport transport.WrapperFunc
	// AllowInsecure accepts kubeconfigs with insecure-skip-tls-verify: true
	// or an http:// server (a LOCAL/testing aid); otherwise For refuses
	// them with ErrInsecure or ErrPlainHTTP.
	AllowInsecure bool

	mu sync.Mutex
	// clients: by cluster (ClusterOf the key), then by key, so that
	// forgetting a runtime costs its own clients only (a shard member
	// forgets every runtime it lost at once).
	clients map[string]map[string]cachedClient
	// mappers: NewMapper's mapper of each cluster (ClusterOf the key),
	// shared by the clients of its users (Runtimes.ForUser): what a
	// cluster serves does not depend on who asks, and a dynamic mapper
	// holds what it discovered of the cluster (docs/performance.md "Shards
	// at scale").
	mappers map[string]cachedMapper
}

type cachedClient struct {
	sum    [sha256.Size]byte
	client client.Client
	// http is the client's own HTTP client: Forget closes its idle
	// connections.
	http *http.Client
}

type cachedMapper struct {
	sum    [sha256.Size]byte
	mapper meta.RESTMapper
}

// ClusterOf is the cluster a key of ClusterClients names: the key up to
// its first NUL (Runtimes keys a user's client "<runtime>\x00<user>").
func ClusterOf(key string) string {
	cluster, _, _ := strings.Cut(key, userSeparator)
	return cluster
}

// clusterSum identifies the API server and the credentials of cfg, not
// whom it impersonates: configs of one sum may share a REST mapper.
func clusterSum(cfg *rest.Config) [sha256.Size]byte {
	h := sha256.New()
	for _, part := range [][]byte{
		[]byte(cfg.Host), []byte(cfg.APIPath), []byte(cfg.ServerName), cfg.CAData, cfg.CertData, cfg.KeyData,
		[]byte(cfg.BearerToken), []byte(cfg.Username), []byte(cfg.Password), []byte(fmt.Sprint(cfg.Insecure)),
	} {
		fmt.Fprintf(h, "%d:", len(part))
		h.Write(part)
	}
	var sum [sha256.Size]byte
	h.Sum(sum[:0])
	return sum
}

var _ ClusterClients = (*KubeconfigClients)(nil)

// For implements ClusterClients.
func (k *KubeconfigClients) For(_ context.Context, key string, kubeconfig []byte) (client.Client, error) {
	if k.Scheme == nil || (k.Mapper == nil && k.NewMapper == nil) {
		return nil, errors.New("skrclient: KubeconfigClients needs a Scheme and a Mapper or NewMapper")
	}
	sum := sha256.Sum256(kubeconfig)
	k.mu.Lock()
	if c, ok := k.clients[ClusterOf(key)][key]; ok && c.sum == sum {
		k.mu.Unlock()
		return c.client, nil
	}
	k.mu.Unlock()

	cfg, err := RESTConfig(kubeconfig)
	if err != nil {
		return nil, err
	}
	if cfg.Insecure && !k.AllowInsecure {
		return nil, ErrInsecure
	}
	if !rest.IsConfigTransportTLS(*cfg) && !k.AllowInsecure {
		return nil, ErrPlainHTTP
	}
	cfg.Timeout = k.Timeout
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultTimeout
	}
	cfg.QPS, cfg.Burst = k.QPS, k.Burst
	cfg.UserAgent = k.UserAgent
	if k.WrapTransport != nil {
		cfg.Wrap(k.WrapTransport)
	}
	opts := client.Options{Scheme: k.Scheme, Mapper: k.Mapper}
	if opts.HTTPClient, err = rest.HTTPClientFor(cfg); err != nil {
		return nil, fmt.Errorf("client for runtime cluster: %w", err)
	}
	cluster, csum := ClusterOf(key), clusterSum(cfg)
	newMapper := false
	if opts.Mapper == nil {
		k.mu.Lock()
		if m, ok := k.mappers[cluster]; ok && m.sum == csum {
			opts.Mapper = m.mapper
		}
		k.mu.Unlock()
	}
	if opts.Mapper == nil {
		if opts.Mapper, err = k.NewMapper(cfg, opts.HTTPClient); err != nil {
			return nil, fmt.Errorf("REST mapper for runtime cluster: %w", err)
		}
		newMapper = true
	}
	c, err := client.New(cfg, opts)
	if err != nil {
		return nil, fmt.Errorf("client for runtime cluster: %w", err)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.clients == nil {
		k.clients, k.mappers = map[string]map[string]cachedClient{}, map[string]cachedMapper{}
	}
	if k.clients[cluster] == nil {
		k.clients[cluster] = map[string]cachedClient{}
	}
	if old, ok := k.clients[cluster][key]; ok {
		old.http.CloseIdleConnections()
	}
	k.clients[cluster][key] = cachedClient{sum: sum, client: c, http: opts.HTTPClient}
	if newMapper {
		k.mappers[cluster] = cachedMapper{sum: csum, mapper: opts.Mapper}
	}
	return c, nil
}

// ErrInsecure: the kubeconfig skips TLS verification of the runtime's API
// server (insecure-skip-tls-verify: true), so anyone on the path could
// impersonate the runtime and receive its credentials.
var ErrInsecure = errors.New("kubeconfig sets insecure-skip-tls-verify: true; the runtime's API server would not be verified " +
	"(give it certificate-authority-data; vs-controller's --allow-insecure-skr accepts it, for local use only)")

// ErrPlainHTTP: the kubeconfig's server is not https://, so the runtime's
// API server is not authenticated and its credentials travel in clear.
var ErrPlainHTTP = errors.New("kubeconfig server is not https://; the runtime's API server would not be verified and its credentials would travel unencrypted " +
	"(vs-controller's --allow-insecure-skr accepts it, for local use only)")

// Forget implements ClusterClients; forgetting a cluster's own key (no
// user) also drops its users' clients and its REST mapper. The idle
// connections of the clients dropped are closed; a request in flight on
// one of them still completes.
func (k *KubeconfigClients) Forget(key string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	cluster := ClusterOf(key)
	var drop []cachedClient
	if cluster != key {
		if c, ok := k.clients[cluster][key]; ok {
			drop = append(drop, c)
			delete(k.clients[cluster], key)
		}
	} else {
		for _, c := range k.clients[cluster] {
			drop = append(drop, c)
		}
		delete(k.clients, cluster)
		delete(k.mappers, cluster)
	}
	for _, c := range drop {
		c.http.CloseIdleConnections()
	}
}

// NewRESTMapper is a static REST mapper of the given kinds (true: cluster
// scoped, false: namespaced).
func NewRESTMapper(kinds map[schema.GroupVersionKind]bool) meta.RESTMapper {
	m := meta.NewDefaultRESTMapper(nil)
	for gvk, clusterScoped := range kinds {
		scope := meta.RESTScopeNamespace
		if clusterScoped {
			scope = meta.RESTScopeRoot
		}
		m.Add(gvk, scope)
	}
	return m
}

// DynamicRESTMapper is a NewMapper: controller-runtime's dynamic REST
// mapper, which discovers an API group when a kind of it is first used (so
// a CRD installed later is found then). Its discovery asks for the
// per-group documents (discovery.AcceptV1), not the aggregated one: given
// the aggregated document the mapper takes in every resource the cluster
// serves at its first lookup — about 0.3 MiB from a Kubernetes 1.34 API
// server, most of module-sync's memory at scale (docs/performance.md) —
// while per group it holds the list of groups and the resources of the
// groups it was asked about.
func DynamicRESTMapper(cfg *rest.Config, httpClient *http.Client) (meta.RESTMapper, error) {
	next := httpClient.Transport
	if next == nil {
		next = http.DefaultTransport
	}
	perGroup := *httpClient
	perGroup.Transport = perGroupDiscovery{next: next}
	return apiutil.NewDynamicRESTMapper(cfg, &perGroup)
}

// perGroupDiscovery asks for the per-group discovery documents where
// client-go's discovery client would accept the aggregated one.
type perGroupDiscovery struct{ next http.RoundTripper }

func (p perGroupDiscovery) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.Contains(req.Header.Get("Accept"), "g=apidiscovery.k8s.io") {
		req = req.Clone(req.Context())
		req.Header.Set("Accept", discovery.AcceptV1)
	}
	return p.next.RoundTrip(req)
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
