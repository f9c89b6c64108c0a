package skrclient

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ErrNoKubeconfig: the runtime's kubeconfig Secret does not exist (yet).
var ErrNoKubeconfig = errors.New("no kubeconfig Secret")

// Runtimes gives the client of a runtime by its ID: its kubeconfig Secret
// kubeconfig-<runtime-id> in Namespace, through a cache of clients
// (ClusterClients), optionally impersonating a user (module-sync acts in a
// runtime as each module's identity).
type Runtimes struct {
	// Reader reads the kubeconfig Secrets in Namespace by name: in
	// module-sync the API reader, because its RBAC allows get on exactly
	// those Secrets and no list or watch (least privilege,
	// docs/security.md). APIReader, when set, is asked when Reader does
	// not hold the Secret (a cache of labelled Secrets, as vs-controller
	// has).
	Reader    client.Reader
	APIReader client.Reader
	Namespace string
	Clients   ClusterClients
}

// For is the client of runtime runtimeID with the kubeconfig's own
// identity; ErrNoKubeconfig (wrapped) when its kubeconfig Secret does not
// exist.
func (r *Runtimes) For(ctx context.Context, runtimeID string) (client.Client, error) {
	return r.client(ctx, runtimeID, "")
}

// ForUser is the client of runtime runtimeID that acts as user in the
// runtime (impersonation: the kubeconfig's identity must be allowed to
// impersonate; the runtime's RBAC for user decides what it may do).
func (r *Runtimes) ForUser(ctx context.Context, runtimeID, user string) (client.Client, error) {
	return r.client(ctx, runtimeID, user)
}

// userSeparator separates a runtime's key from the user its client acts
// as (ClusterOf).
const userSeparator = "\x00"

// Forget drops the clients of runtimeID (its users' too).
func (r *Runtimes) Forget(runtimeID string) { r.Clients.Forget(r.Key(runtimeID)) }

// Key is the key of runtimeID's client in Clients.
func (r *Runtimes) Key(runtimeID string) string { return r.Namespace + "/" + runtimeID }

func (r *Runtimes) client(ctx context.Context, runtimeID, user string) (client.Client, error) {
	kubeconfig, err := Kubeconfig(ctx, r.Reader, r.Namespace, runtimeID)
	if err == nil && kubeconfig == nil && r.APIReader != nil {
		kubeconfig, err = Kubeconfig(ctx, r.APIReader, r.Namespace, runtimeID)
	}
	if err != nil {
		return nil, fmt.Errorf("read kubeconfig Secret %s: %w", SecretName(runtimeID), err)
	}
	if kubeconfig == nil {
		return nil, fmt.Errorf("%w %s/%s", ErrNoKubeconfig, r.Namespace, SecretName(runtimeID))
	}
	key := r.Key(runtimeID)
	if user != "" {
		if kubeconfig, err = impersonating(kubeconfig, user); err != nil {
			return nil, fmt.Errorf("kubeconfig Secret %s: %w", SecretName(runtimeID), err)
		}
		key += userSeparator + user
	}
	c, err := r.Clients.For(ctx, key, kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig Secret %s: %w", SecretName(runtimeID), err)
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
