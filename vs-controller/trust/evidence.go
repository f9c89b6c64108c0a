package trust

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// AnnotationEvidence, on a runtime's Certificate in the KCP, is what the
// runtime's SKR was last given (Evidence, JSON): the gateway CAs of its
// ca.crt and the CA of its certificate. Whoever pushes a runtime's bundle
// (its shard owner) writes it, only when it changes — never per pass; the
// cluster-wide decisions (which runtime CAs are still in use, when the
// gateway's server certificate may switch to a new gateway CA) are taken
// by the elected replica from what every runtime's Certificate says
// (docs/certificates.md, "Evidence across replicas"). A restart forgets
// nothing of it.
const AnnotationEvidence = "operator.kyma-project.io/trust-evidence"

// Evidence is what one runtime's SKR holds, as its last bundle push left it.
type Evidence struct {
	// Gateway: ",fp1,fp2,…," of the gateway CAs in the SKR Secret's ca.crt
	// ("" without a gateway CA anchor).
	Gateway string `json:"gateway,omitempty"`
	// CA: fingerprint of the CA that signed the certificate the SKR holds.
	CA string `json:"ca,omitempty"`
	// PrevCA signed the certificate before, which the webhook may still
	// serve until Settle after ChangedAt.
	PrevCA    string     `json:"prevCA,omitempty"`
	ChangedAt *time.Time `json:"changedAt,omitempty"`
}

// EvidenceOf reads a Certificate's evidence; false when it has none (its
// runtime was never pushed since the evidence was kept, or the annotation
// is unreadable — then the runtime's state is unknown).
func EvidenceOf(crt client.Object) (Evidence, bool) {
	v, ok := crt.GetAnnotations()[AnnotationEvidence]
	if !ok {
		return Evidence{}, false
	}
	var e Evidence
	if err := json.Unmarshal([]byte(v), &e); err != nil {
		return Evidence{}, false
	}
	return e, true
}

// next is the evidence after a push of t over what was stored (prev, ok).
func (e Evidence) next(t RuntimeTrust, prev Evidence, ok bool, now time.Time) Evidence {
	e = Evidence{Gateway: t.gatewayFP, CA: t.leafCA}
	if !ok {
		return e
	}
	if prev.CA != t.leafCA {
		at := now.UTC().Truncate(time.Second)
		e.PrevCA, e.ChangedAt = prev.CA, &at
	} else {
		e.PrevCA, e.ChangedAt = prev.PrevCA, prev.ChangedAt
	}
	return e
}

func (e Evidence) equal(o Evidence) bool {
	if e.Gateway != o.Gateway || e.CA != o.CA || e.PrevCA != o.PrevCA || (e.ChangedAt == nil) != (o.ChangedAt == nil) {
		return false
	}
	return e.ChangedAt == nil || e.ChangedAt.Equal(*o.ChangedAt)
}

// recordEvidence stores, on the runtime's Certificate, that its SKR holds t
// — a merge patch of the annotation, only when it differs from what the
// Certificate (as the cache has it) says.
func (k *Keeper) recordEvidence(ctx context.Context, namespace, id string, t RuntimeTrust) error {
	crt := &certmanagerv1.Certificate{}
	if err := k.Cache.Get(ctx, client.ObjectKey{Namespace: namespace, Name: certificates.Name(id)}, crt); err != nil {
		// Gone: the runtime is being removed; nothing to keep.
		return client.IgnoreNotFound(err)
	}
	prev, ok := EvidenceOf(crt)
	next := Evidence{}.next(t, prev, ok, k.now())
	if ok && next.equal(prev) {
		return nil
	}
	b, err := json.Marshal(next)
	if err != nil {
		return err
	}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationEvidence, b)
	if err := k.Cache.Patch(ctx, crt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("record the trust evidence on Certificate %s/%s: %w", namespace, crt.Name, client.IgnoreNotFound(err))
	}
	vsmetrics.RuntimeWrites.WithLabelValues("certificate-trust-evidence").Inc()
	return nil
}

// trustRuntime is a runtime the keeper decides for (its Kyma has an
// skr-domain and is not being deleted) with its stored evidence.
type trustRuntime struct {
	kyma     *metav1.PartialObjectMetadata
	key      string
	evidence Evidence
	known    bool
}

// trustRuntimes lists the runtimes with their evidence, from the cache
// (the Kymas and Certificates of KymaNamespace): no API request.
func (k *Keeper) trustRuntimes(ctx context.Context) ([]trustRuntime, error) {
	kymas := identity.NewKymaList()
	if err := k.Cache.List(ctx, kymas, client.InNamespace(k.KymaNamespace)); err != nil {
		return nil, err
	}
	var crts certmanagerv1.CertificateList
	if err := k.Cache.List(ctx, &crts, client.InNamespace(k.KymaNamespace)); err != nil {
		return nil, err
	}
	byName := make(map[string]*certmanagerv1.Certificate, len(crts.Items))
	for i := range crts.Items {
		byName[crts.Items[i].Name] = &crts.Items[i]
	}
	out := make([]trustRuntime, 0, len(kymas.Items))
	for i := range kymas.Items {
		ky := &kymas.Items[i]
		if ky.GetDeletionTimestamp() != nil || ky.GetAnnotations()[contract.AnnotationSKRDomain] == "" {
			continue
		}
		rt := trustRuntime{kyma: ky, key: client.ObjectKeyFromObject(ky).String()}
		if crt := byName[certificates.Name(identity.RuntimeIDOf(ky))]; crt != nil {
			rt.evidence, rt.known = EvidenceOf(crt)
		}
		out = append(out, rt)
	}
	return out, nil
}

func (k *Keeper) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}
