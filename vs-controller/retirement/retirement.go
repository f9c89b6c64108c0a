// Package retirement retires a runtime's previous client certificates
// once its current one reached the SKR, and revokes the current one on
// request (docs/architecture.md §4.9, docs/operations.md "A runtime's key
// leaked"), without CRLs: it writes, once per issuance, the Kyma's
// annotation contract.AnnotationRetiredCertificates, which SAN pinning
// (ext-authz, from the Kyma store it already watches) applies to every
// Check — no write per request, 24 bytes a runtime in ext-authz.
//
//   - Renewal: after a new certificate reached the SKR, every certificate
//     issued before it is refused from Overlap later (the webhook reloads
//     its mounted Secret meanwhile). While such an overlap runs, the next
//     renewal waits for it to end, so every certificate is retired at most
//     two overlaps after its successor reached the SKR.
//   - Revocation: the annotation contract.RevokeCertificateAnnotation on the
//     runtime's Certificate. The pass marks the certificate being revoked
//     (AnnotationRevoking: its notBefore) and requests a new one (the
//     Issuing condition, as `cmctl renew` sets it); once the new one reached
//     the SKR, every older one is refused at once and both annotations
//     are removed.
package retirement

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// AnnotationRevoking, on a runtime's Certificate, is the notBefore (RFC
// 3339) of the certificate a revocation replaces: written with the request
// for a new one, removed once the new one is in the SKR and the old one
// retired.
const AnnotationRevoking = "operator.kyma-project.io/revoking-certificate"

// DefaultOverlap is how long the previous certificate stays good after its
// successor reached the SKR: a kubelet updates a mounted Secret within about
// a minute and a half (its sync period plus its cache's TTL), the webhook
// reloads it within seconds.
const DefaultOverlap = 10 * time.Minute

// Event reasons on the Kyma.
const (
	ReasonRevocationRequested = "CertificateRevocationRequested"
	ReasonRevoked             = "CertificateRevoked"
	ReasonRetired             = "PreviousCertificateRetired"
)

// Retirer writes a runtime's certificate retirements. Client is the KCP
// client (the manager's cached one); Overlap DefaultOverlap when 0.
type Retirer struct {
	Client   client.Client
	Overlap  time.Duration
	Recorder events.EventRecorder
	Now      func() time.Time
}

// AfterDelivery runs once the SKR of runtime id (its Kyma kyma) holds the
// certificate leaf: it writes the Kyma's retirement when leaf is newer than
// what is retired, and drives a revocation requested on the runtime's
// Certificate. A positive duration asks to come back then (an overlap that
// must end first).
func (r *Retirer) AfterDelivery(ctx context.Context, kyma client.Object, id string, leaf *x509.Certificate) (time.Duration, error) {
	if leaf == nil {
		return 0, nil
	}
	now := r.now()
	crt := &certmanagerv1.Certificate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}, crt); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	cur, err := contract.ParseRetirement(kyma.GetAnnotations()[contract.AnnotationRetiredCertificates])
	if err != nil {
		// Unreadable: SAN pinning refuses every certificate of the runtime
		// until it is written again, from what is known now.
		log.FromContext(ctx).Info("unreadable certificate retirement replaced", "runtime", id, "error", err.Error())
		cur = contract.Retirement{}
	}
	_, revoke := crt.Annotations[contract.RevokeCertificateAnnotation]
	revoking, marked := crt.Annotations[AnnotationRevoking]

	if revoke || marked {
		since, perr := time.Parse(time.RFC3339, revoking)
		if !marked || perr != nil || !leaf.NotBefore.After(since) {
			// The SKR still holds the certificate to revoke: mark it and
			// ask for a new one (the new Secret brings the next pass).
			return 0, r.requestNew(ctx, kyma, crt, leaf, marked && perr == nil)
		}
		if err := r.write(ctx, kyma, next(cur, leaf.NotBefore, now, now), "revoked"); err != nil {
			return 0, err
		}
		r.event(kyma, corev1.EventTypeNormal, ReasonRevoked, fmt.Sprintf("the new runtime certificate (valid from %s) is in the SKR: every older one is refused from now on",
			leaf.NotBefore.UTC().Format(time.RFC3339)))
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:null,%q:null}}}`, contract.RevokeCertificateAnnotation, AnnotationRevoking)
		if err := r.Client.Patch(ctx, crt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			return 0, fmt.Errorf("clear the revocation of Certificate %s/%s: %w", crt.Namespace, crt.Name, client.IgnoreNotFound(err))
		}
		vsmetrics.RuntimeWrites.WithLabelValues("certificate-revocation").Inc()
		return 0, nil
	}

	switch {
	case leaf.NotBefore.Equal(cur.IssuedBefore):
		return 0, nil // retired already
	case leaf.NotBefore.Before(cur.IssuedBefore):
		// The KCP's Secret holds a certificate older than one the SKR had
		// (a restored Secret): it is refused; a new one is asked for.
		log.FromContext(ctx).Info("the runtime certificate is older than its retirement; requesting a new one", "runtime", id,
			"notBefore", leaf.NotBefore, "retired", cur.String())
		_, err := trust.RequestIssuing(ctx, r.Client, crt, "the certificate is retired")
		return 0, err
	case !cur.InEffect(now):
		return cur.From.Sub(now), nil // one overlap at a time
	}
	if err := r.write(ctx, kyma, next(cur, leaf.NotBefore, now.Add(r.overlap()), now), "renewal"); err != nil {
		return 0, err
	}
	if !cur.IssuedBefore.IsZero() {
		r.event(kyma, corev1.EventTypeNormal, ReasonRetired, fmt.Sprintf("certificates issued before %s are refused from %s (the overlap after renewal)",
			leaf.NotBefore.UTC().Format(time.RFC3339), now.Add(r.overlap()).UTC().Format(time.RFC3339)))
	}
	return 0, nil
}

// next is the retirement after cur once the certificate valid from
// issuedBefore is in the SKR: everything older is refused from from on,
// and what cur retired by now stays retired.
func next(cur contract.Retirement, issuedBefore, from, now time.Time) contract.Retirement {
	always := cur.Always
	if cur.InEffect(now) && cur.IssuedBefore.After(always) {
		always = cur.IssuedBefore
	}
	return contract.Retirement{IssuedBefore: issuedBefore, From: from, Always: always}
}

// requestNew marks the certificate being revoked (unless marked already)
// and requests a new one.
func (r *Retirer) requestNew(ctx context.Context, kyma client.Object, crt *certmanagerv1.Certificate, leaf *x509.Certificate, marked bool) error {
	if !marked {
		patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, AnnotationRevoking, leaf.NotBefore.UTC().Format(time.RFC3339))
		if err := r.Client.Patch(ctx, crt, client.RawPatch("application/merge-patch+json", patch)); err != nil {
			return fmt.Errorf("mark the revocation on Certificate %s/%s: %w", crt.Namespace, crt.Name, client.IgnoreNotFound(err))
		}
		vsmetrics.RuntimeWrites.WithLabelValues("certificate-revocation").Inc()
	}
	requested, err := trust.RequestIssuing(ctx, r.Client, crt, "the runtime certificate is revoked ("+contract.RevokeCertificateAnnotation+")")
	if requested {
		r.event(kyma, corev1.EventTypeNormal, ReasonRevocationRequested, fmt.Sprintf("revoking the runtime certificate valid from %s: a new one is issued and delivered first",
			leaf.NotBefore.UTC().Format(time.RFC3339)))
	}
	return err
}

// write stores the retirement on the Kyma (a merge patch of the one
// annotation: nothing else of the Kyma is touched).
func (r *Retirer) write(ctx context.Context, kyma client.Object, ret contract.Retirement, cause string) error {
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, contract.AnnotationRetiredCertificates, ret.String())
	if err := r.Client.Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", patch)); err != nil {
		return fmt.Errorf("write the certificate retirement on Kyma %s/%s: %w", kyma.GetNamespace(), kyma.GetName(), err)
	}
	vsmetrics.RuntimeWrites.WithLabelValues("kyma-retired-certificates").Inc()
	vsmetrics.CertificatesRetired.WithLabelValues(cause).Inc()
	log.FromContext(ctx).Info("runtime certificates retired", "kyma", kyma.GetName(), "cause", cause, "retirement", ret.String())
	return nil
}

func (r *Retirer) event(kyma client.Object, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(kyma, nil, typ, reason, reason, "%s", msg)
	}
}

func (r *Retirer) overlap() time.Duration {
	if r.Overlap > 0 {
		return r.Overlap
	}
	return DefaultOverlap
}

func (r *Retirer) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}
