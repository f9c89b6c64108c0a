package runtimes

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// ReasonExpiringSoon is the Warning Event reason on a Kyma whose runtime
// certificate expires within trust.ExpiringSoon.
const ReasonExpiringSoon = "CertificateExpiringSoon"

// trustFor is the trust a runtime's bundle carries (trust.Keeper's
// RuntimeTrust; without a keeper the runtime certificate's ca.crt); ok is
// false while the runtime must wait for the trust bundles.
func (r *Reconciler) trustFor(ctx context.Context, kyma client.Object, id string, tls *certificates.TLS) (trust.RuntimeTrust, bool) {
	certs, _ := trust.ParseBundle(tls.Cert)
	var leaf *x509.Certificate
	if len(certs) > 0 {
		leaf = certs[0]
		var signer *x509.Certificate
		if r.Trust != nil {
			signer = r.Trust.SignerOf(leaf)
		}
		r.reportExpiry(ctx, kyma, id, leaf, signer)
	}
	if r.Trust == nil {
		return trust.RuntimeTrust{CABundle: tls.CA, GatewayCA: tls.CA}, true
	}
	return r.Trust.RuntimeTrust(ctx, id, leaf, tls.CA)
}

// reportExpiry logs and reports a runtime certificate that expires within
// trust.ExpiringSoon (counted by the trust keeper's metrics): by its own
// notAfter or by that of ca, the CA that signed it (nil when unknown),
// whichever comes first (trust.Expiry; cert-manager does not cap a leaf at
// its CA's end).
func (r *Reconciler) reportExpiry(ctx context.Context, kyma client.Object, id string, leaf, ca *x509.Certificate) {
	end := trust.Expiry(leaf, ca)
	left := time.Until(end)
	if left >= trust.ExpiringSoon {
		return
	}
	log.FromContext(ctx).Info("runtime certificate expires soon", "runtime", id, "notAfter", leaf.NotAfter, "usableUntil", end, "left", left.Round(time.Second).String())
	r.event(kyma, corev1.EventTypeWarning, ReasonExpiringSoon, fmt.Sprintf("runtime certificate expires at %s", end.UTC().Format(time.RFC3339)))
}
