package runtimes

// The runtimes the watch-path health evaluator looks after and their SKR
// clients; what it sees of each (health.Prober) is probe.go.

import (
	"context"
	"errors"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// HealthRuntimes lists the runtimes whose bundle a pass completed (keyed
// by runtime ID): the runtimes the health evaluator looks after. Without
// shards, the passes of this process. With shards the evaluator stays on
// the elected replica and looks after every runtime (a Watcher's
// silentRuntimes count is fleet-wide, and the evaluation reads the SKRs,
// never writes them): a runtime's pass completed on whichever replica
// owned it when its Certificate carries the trust evidence that pass
// recorded (trust.AnnotationEvidence). Each runtime's managers are those
// of the webhooks its bundle carries (bundle.Managers of the Watchers the
// bundle is built from, the same for every runtime): its health report
// speaks for them alone.
func (r *Reconciler) HealthRuntimes(ctx context.Context) ([]health.Runtime, error) {
	list := newKymaList()
	if err := r.Client.List(ctx, list, client.InNamespace(r.KymaNamespace)); err != nil {
		return nil, err
	}
	trusted, err := r.trustedWatchers(ctx)
	if err != nil {
		return nil, err
	}
	managers := map[string]bool{}
	for _, m := range bundle.Managers(trusted) {
		managers[m] = true
	}
	pushed := map[string]bool{}
	if r.Shards != nil && r.Trust != nil {
		var crts certmanagerv1.CertificateList
		if err := r.Client.List(ctx, &crts, client.InNamespace(r.KymaNamespace)); err != nil {
			return nil, err
		}
		for i := range crts.Items {
			if _, ok := trust.EvidenceOf(&crts.Items[i]); ok {
				pushed[crts.Items[i].Name] = true
			}
		}
	}
	out := make([]health.Runtime, 0, len(list.Items))
	for i := range list.Items {
		k := &list.Items[i]
		_, bundled := r.bundled.Load(types.NamespacedName{Namespace: k.Namespace, Name: k.Name}.String())
		if (!bundled && !pushed[certificates.Name(RuntimeID(k))]) ||
			k.DeletionTimestamp != nil || k.Annotations[contract.AnnotationSKRDomain] == "" || !controllerutil.ContainsFinalizer(k, Finalizer) {
			continue
		}
		k.SetGroupVersionKind(kymaGVK)
		out = append(out, health.Runtime{ID: RuntimeID(k), Kyma: k, Managers: managers})
	}
	return out, nil
}

// skrFor is the SKR client of a runtime, as its bundle pass gets it.
func (r *Reconciler) skrFor(ctx context.Context, rt health.Runtime) (client.Client, error) {
	key := client.ObjectKeyFromObject(rt.Kyma).String()
	kc, err := r.kubeconfig(ctx, key, rt.ID)
	if err != nil {
		return nil, err
	}
	if kc == nil {
		return nil, errors.New("no kubeconfig Secret")
	}
	return r.Clients.For(ctx, key, kc)
}
