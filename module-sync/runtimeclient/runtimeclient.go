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
	"k8s.io/client-go/tools/clientcmd"
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
	// Reader reads the kubeconfig Secrets in Namespace by name: in
	// module-sync the API reader, because its RBAC allows get on exactly
	// those Secrets and no list or watch (least privilege,
	// docs/security.md). APIReader, when set, is asked when Reader does
	// not hold the Secret (a cache of labelled Secrets, as vs-controller
	// has).
	Reader    client.Reader
	APIReader client.Reader
	Namespace string
	Clients   skrclient.ClusterClients
}

// For is the client of runtime runtimeID with the kubeconfig's own
// identity; ErrNoKubeconfig (wrapped) when its kubeconfig Secret does not
// exist.
func (r *Clients) For(ctx context.Context, runtimeID string) (client.Client, error) {
	return r.client(ctx, runtimeID, "")
}

// ForUser is the client of runtime runtimeID that acts as user in the
// runtime (impersonation: the kubeconfig's identity must be allowed to
// impersonate; the runtime's RBAC for user decides what it may do).
func (r *Clients) ForUser(ctx context.Context, runtimeID, user string) (client.Client, error) {
	return r.client(ctx, runtimeID, user)
}

// Key is the key of runtimeID's client in Clients.
func (r *Clients) Key(runtimeID string) string { return r.Namespace + "/" + runtimeID }

func (r *Clients) client(ctx context.Context, runtimeID, user string) (client.Client, error) {
	kubeconfig, err := skrclient.Kubeconfig(ctx, r.Reader, r.Namespace, runtimeID)
	if err == nil && kubeconfig == nil && r.APIReader != nil {
		kubeconfig, err = skrclient.Kubeconfig(ctx, r.APIReader, r.Namespace, runtimeID)
	}
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig Secret %s: %w", skrclient.SecretName(runtimeID), err)
	}
	if kubeconfig == nil {
		return nil, fmt.Errorf("%w %s/%s", ErrNoKubeconfig, r.Namespace, skrclient.SecretName(runtimeID))
	}
	key := r.Key(runtimeID)
	if user != "" {
		if kubeconfig, err = impersonating(kubeconfig, user); err != nil {
			return nil, fmt.Errorf("kubeconfig Secret %s: %w", skrclient.SecretName(runtimeID), err)
		}
		key += "\x00" + user
	}
	c, err := r.Clients.For(ctx, key, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig Secret %s: %w", skrclient.SecretName(runtimeID), err)
	}
	return c, nil
}

// impersonating is the kubeconfig with its current context's user acting
// as user.
func impersonating(kubeconfig []byte, user string) ([]byte, error) {
	raw, err := clientcmd.Load(kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("parse kubeconfig: %w", err)
	}
	kctx, ok := raw.Contexts[raw.CurrentContext]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no current context %q", raw.CurrentContext)
	}
	auth, ok := raw.AuthInfos[kctx.AuthInfo]
	if !ok {
		return nil, fmt.Errorf("kubeconfig has no user %q", kctx.AuthInfo)
	}
	auth.Impersonate, auth.ImpersonateUID, auth.ImpersonateGroups, auth.ImpersonateUserExtra = user, "", nil, nil
	return clientcmd.Write(*raw)
}
