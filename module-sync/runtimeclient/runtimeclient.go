// Package runtimeclient gives module-sync's reconcilers the client of a runtime's
// cluster (SKR): its kubeconfig Secret kubeconfig-<runtime-id> in the Kyma
// namespace, through a cache of clients from package skrclient, with a
// dynamic REST mapper per runtime because Module CRs and SyncResource
// items are of any kind.
package runtimeclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/metrics"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// KubeconfigClients are module-sync's runtime clients: any kind
// (unstructured, dynamic REST mapper per runtime), a short timeout,
// requests counted.
func KubeconfigClients(timeout time.Duration) *skrclient.KubeconfigClients {
	s := k8sruntime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		panic(err)
	}
	return &skrclient.KubeconfigClients{
		Scheme: s, NewMapper: skrclient.DynamicRESTMapper, UserAgent: "module-sync", Timeout: timeout,
		WrapTransport: metrics.CountRequests,
	}
}

// ErrNoKubeconfig: the runtime's kubeconfig Secret does not exist (yet).
var ErrNoKubeconfig = errors.New("no kubeconfig Secret")

// Clients gives the client of a Kyma's runtime.
type Clients struct {
	// Reader reads the kubeconfig Secrets in Namespace.
	Reader    client.Reader
	Namespace string
	Clients   skrclient.ClusterClients
}

// For is the client of runtime runtimeID; ErrNoKubeconfig (wrapped) when
// its kubeconfig Secret does not exist.
func (r *Clients) For(ctx context.Context, runtimeID string) (client.Client, error) {
	kubeconfig, err := skrclient.Kubeconfig(ctx, r.Reader, r.Namespace, runtimeID)
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig Secret %s: %w", skrclient.SecretName(runtimeID), err)
	}
	if kubeconfig == nil {
		return nil, fmt.Errorf("%w %s/%s", ErrNoKubeconfig, r.Namespace, skrclient.SecretName(runtimeID))
	}
	c, err := r.Clients.For(ctx, r.Namespace+"/"+runtimeID, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig Secret %s: %w", skrclient.SecretName(runtimeID), err)
	}
	return c, nil
}
