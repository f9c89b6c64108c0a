package runtimes

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/metrics"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// Event reasons of the CA rotation.
const (
	ReasonRenewalRequested = "CertificateRenewalRequested"
	ReasonExpiringSoon     = "CertificateExpiringSoon"
)

// trustWait is how long a runtime waits for the trust bundles to include the
// CA of its certificate.
const trustWait = time.Second

// runtimeTrust is what one runtime's bundle carries: the webhook
// configuration's caBundle and the Secret's ca.crt.
type runtimeTrust struct {
	caBundle  []byte
	gatewayCA []byte
	leaf      *x509.Certificate
	gatewayFP string
	current   *x509.Certificate
	// leafCA: fingerprint of the CA that signed leaf.
	leafCA string
	// renewAfter: the earliest time a renewal may be requested (the new
	// CA settled in the gateway's client CA).
	renewAfter time.Time
}

// trustFor is the trust a runtime's bundle carries; ok is false while the
// published runtime CA bundle (what the gateway trusts) does not hold the CA
// of the runtime's certificate, which must then not reach the SKR yet.
func (r *Reconciler) trustFor(ctx context.Context, kyma client.Object, id string, tls *bundle.TLS) (runtimeTrust, bool) {
	certs, _ := trust.ParseBundle(tls.Cert)
	var leaf *x509.Certificate
	if len(certs) > 0 {
		leaf = certs[0]
	}
	if r.Trust == nil {
		if leaf != nil {
			r.reportExpiry(ctx, kyma, id, leaf, nil)
		}
		return runtimeTrust{caBundle: tls.CA, gatewayCA: tls.CA, leaf: leaf}, true
	}
	p := r.Trust.current()
	idx := -1
	if p != nil && leaf != nil {
		idx = trust.SignedBy(leaf, p.runtimeCAs)
	}
	if leaf != nil {
		var ca *x509.Certificate
		if idx >= 0 {
			ca = p.runtimeCAs[idx]
		}
		r.reportExpiry(ctx, kyma, id, leaf, ca)
	}
	if p == nil || p.runtimeBundle == nil || idx < 0 {
		r.Trust.Poke()
		log.FromContext(ctx).V(1).Info("runtime certificate's CA is not in the published trust bundle yet; waiting", "runtime", id)
		return runtimeTrust{}, false
	}
	t := runtimeTrust{caBundle: p.runtimeBundle, gatewayCA: tls.CA, leaf: leaf, current: p.runtimeCurrent,
		renewAfter: p.runtimeSince.Add(r.Trust.Settle), leafCA: trust.Fingerprint(p.runtimeCAs[idx])}
	if r.Trust.Gateway != nil {
		if p.gatewayBundle == nil {
			r.Trust.Poke()
			return runtimeTrust{}, false
		}
		t.gatewayCA, t.gatewayFP = p.gatewayBundle, gatewayFingerprints(p.gatewayCAs)
	}
	return t, true
}

// afterPush runs once a runtime's SKR holds t: it remembers the gateway CAs
// the runtime trusts and, when the runtime's certificate is not signed by
// the current CA, requests its renewal (rate-limited). A positive duration
// asks to come back then (the rate limit).
func (r *Reconciler) afterPush(ctx context.Context, kyma client.Object, key, id string, t runtimeTrust) (time.Duration, error) {
	if r.Trust != nil {
		pr := pushedRuntime{gatewayFP: t.gatewayFP, leafCA: t.leafCA}
		if v, ok := r.pushed.Load(key); ok {
			if o := v.(pushedRuntime); o.leafCA != t.leafCA {
				pr.prevLeafCA, pr.changedAt = o.leafCA, time.Now()
			} else {
				pr.prevLeafCA, pr.changedAt = o.prevLeafCA, o.changedAt
			}
		}
		r.pushed.Store(key, pr)
	}
	if t.current == nil || t.leaf == nil || trust.SignedBy(t.leaf, []*x509.Certificate{t.current}) == 0 {
		r.renewalSlots.Delete(key)
		return 0, nil
	}
	if wait := time.Until(t.renewAfter); wait > 0 {
		return wait, nil
	}
	crt := &certmanagerv1.Certificate{}
	if err := r.Client.Get(ctx, client.ObjectKey{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}, crt); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == certmanagerv1.CertificateConditionIssuing && c.Status == "True" {
			r.renewalSlots.Delete(key)
			return 0, nil // requested already
		}
	}
	// The rate limit: each runtime takes a slot once and comes back when it
	// is due (one more pass per runtime). Cancelling the reservation and
	// retrying instead made every waiting runtime run a full pass every
	// 1/rate seconds, racing for one token: with 100 runtimes 3 renewals/s
	// instead of 5 and ~70 SKR requests per runtime (vs-controller/bench
	// BenchmarkCARotation, docs/certificates.md).
	if v, ok := r.renewalSlots.Load(key); ok {
		if wait := time.Until(v.(time.Time)); wait > 0 {
			return wait, nil
		}
	} else if d := r.Renewals.Reserve().Delay(); d > 0 {
		r.renewalSlots.Store(key, time.Now().Add(d))
		return d, nil
	}
	r.renewalSlots.Delete(key)
	requested, err := requestIssuing(ctx, r.Client, crt)
	if err != nil {
		return 0, err
	}
	if requested {
		metrics.RenewalsRequested.Inc()
		r.event(kyma, corev1.EventTypeNormal, ReasonRenewalRequested,
			fmt.Sprintf("the runtime's SKR trusts CA %s: renewal of the runtime certificate (signed by %s) requested", trust.Fingerprint(t.current), t.leaf.Issuer.CommonName))
	}
	return 0, nil
}

// reportExpiry logs and reports a runtime certificate that expires within
// ExpiringSoon (counted by the trust keeper's metrics): by its own notAfter
// or by that of ca, the CA that signed it (nil when unknown), whichever
// comes first (trust.Expiry).
func (r *Reconciler) reportExpiry(ctx context.Context, kyma client.Object, id string, leaf, ca *x509.Certificate) {
	end := trust.Expiry(leaf, ca)
	left := time.Until(end)
	if left >= ExpiringSoon {
		return
	}
	log.FromContext(ctx).Info("runtime certificate expires soon", "runtime", id, "notAfter", leaf.NotAfter, "usableUntil", end, "left", left.Round(time.Second).String())
	r.event(kyma, corev1.EventTypeWarning, ReasonExpiringSoon, fmt.Sprintf("runtime certificate expires at %s", end.UTC().Format(time.RFC3339)))
}
