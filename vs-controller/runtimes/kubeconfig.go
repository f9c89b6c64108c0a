package runtimes

import (
	"context"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// kubeconfig reads runtime id's kubeconfig (skrclient.Kubeconfig); nil
// without error when its Secret does not exist.
//
// The manager's cache holds only Secrets labelled
// contract.LabelPartOf=contract.PartOf (vsmanager.New, least privilege).
// Kubeconfig Secrets are the platform's, not ours, and Lifecycle Manager
// reads them without any label: requiring one would break every runtime
// whose provisioner does not set it. So a kubeconfig Secret the cache does
// not hold is read from the API server (r.APIReader) at every pass, and a
// change of it triggers no pass (the next one — resync, retry, a Kyma or
// Watcher change — uses the new kubeconfig). Labelled ones are served from
// the cache and their changes trigger a pass at once; docs/operations.md
// recommends the label.
//
// The same pattern holds for any other Secret vs-controller did not create:
// read it with the APIReader, never with r.Client (which answers NotFound).
func (r *Reconciler) kubeconfig(ctx context.Context, runtimeKey, id string) ([]byte, error) {
	data, err := skrclient.Kubeconfig(ctx, r.Client, r.KymaNamespace, id)
	if err != nil || data != nil || r.APIReader == nil {
		return data, err
	}
	data, err = skrclient.Kubeconfig(ctx, r.APIReader, r.KymaNamespace, id)
	if err == nil && data != nil {
		if _, seen := r.unlabelled.LoadOrStore(runtimeKey, true); !seen {
			log.FromContext(ctx).Info("kubeconfig Secret lacks the cache label: read from the API server at every pass, its changes trigger no pass; label it to have them cached and watched",
				"secret", r.KymaNamespace+"/"+skrclient.SecretName(id), "label", contract.LabelPartOf+"="+contract.PartOf)
		}
		vsmetrics.KubeconfigUncachedReads.Inc()
		return data, nil
	}
	return data, err
}
