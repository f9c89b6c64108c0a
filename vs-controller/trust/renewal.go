package trust

import (
	"context"
	"crypto/x509"
	"fmt"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// ReasonRenewalRequested is the Event reason on a Kyma whose runtime
// certificate's renewal was requested after a CA rotation.
const ReasonRenewalRequested = "CertificateRenewalRequested"

// Wait is how long a runtime waits for the trust bundles to include the CA
// of its certificate (RuntimeTrust's ok false).
const Wait = time.Second

// RuntimeTrust is what one runtime's bundle carries: the webhook
// configuration's caBundle and the Secret's ca.crt.
type RuntimeTrust struct {
	// CABundle is the webhook configuration's caBundle (the runtime CAs).
	CABundle []byte
	// GatewayCA is the SKR Secret's ca.crt (the gateway CAs).
	GatewayCA []byte

	leaf      *x509.Certificate
	gatewayFP string
	current   *x509.Certificate
	// leafCA: fingerprint of the CA that signed leaf.
	leafCA string
	// renewAfter: the earliest time a renewal may be requested (the new
	// CA settled in the gateway's client CA).
	renewAfter time.Time
}

// RuntimeTrust is the trust a runtime's bundle carries, for its certificate
// leaf (nil when unparsable) whose Secret's ca.crt is tlsCA; ok is false
// while the published runtime CA bundle (what the gateway trusts) does not
// hold the CA of the runtime's certificate, which must then not reach the
// SKR yet (come back after Wait).
func (k *Keeper) RuntimeTrust(ctx context.Context, id string, leaf *x509.Certificate, tlsCA []byte) (RuntimeTrust, bool) {
	p := k.current()
	idx := -1
	if p != nil && leaf != nil {
		idx = SignedBy(leaf, p.runtimeCAs)
	}
	if p == nil || p.runtimeBundle == nil || idx < 0 {
		k.Poke()
		log.FromContext(ctx).V(1).Info("runtime certificate's CA is not in the published trust bundle yet; waiting", "runtime", id)
		return RuntimeTrust{}, false
	}
	t := RuntimeTrust{CABundle: p.runtimeBundle, GatewayCA: tlsCA, leaf: leaf, current: p.runtimeCurrent,
		renewAfter: p.runtimeSince.Add(k.Settle), leafCA: Fingerprint(p.runtimeCAs[idx])}
	if k.Gateway != nil {
		if p.gatewayBundle == nil {
			k.Poke()
			return RuntimeTrust{}, false
		}
		t.GatewayCA, t.gatewayFP = p.gatewayBundle, gatewayFingerprints(p.gatewayCAs)
	}
	return t, true
}

// SignerOf is the CA of the published runtime trust bundle that signed leaf,
// or nil while that is unknown.
func (k *Keeper) SignerOf(leaf *x509.Certificate) *x509.Certificate {
	p := k.current()
	if p == nil || leaf == nil {
		return nil
	}
	if i := SignedBy(leaf, p.runtimeCAs); i >= 0 {
		return p.runtimeCAs[i]
	}
	return nil
}

// AfterPush runs once the SKR of the runtime (runtimeKey, its Kyma kyma,
// runtime ID id) holds t: it records on the runtime's Certificate what the
// SKR holds (AnnotationEvidence, when that changed) and, when the runtime's certificate is not signed by the current CA,
// requests its renewal (rate-limited). A positive duration asks to come
// back then (the rate limit).
func (k *Keeper) AfterPush(ctx context.Context, kyma client.Object, runtimeKey, id string, t RuntimeTrust) (time.Duration, error) {
	if err := k.recordEvidence(ctx, kyma.GetNamespace(), id, t); err != nil {
		return 0, err
	}
	if t.current == nil || t.leaf == nil || SignedBy(t.leaf, []*x509.Certificate{t.current}) == 0 {
		k.renewalSlots.Delete(runtimeKey)
		return 0, nil
	}
	if wait := time.Until(t.renewAfter); wait > 0 {
		return wait, nil
	}
	crt := &certmanagerv1.Certificate{}
	if err := k.Cache.Get(ctx, client.ObjectKey{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}, crt); err != nil {
		return 0, client.IgnoreNotFound(err)
	}
	for _, c := range crt.Status.Conditions {
		if c.Type == certmanagerv1.CertificateConditionIssuing && c.Status == "True" {
			k.renewalSlots.Delete(runtimeKey)
			return 0, nil // requested already
		}
	}
	// The rate limit: each runtime takes a slot once and comes back when it
	// is due (one more pass per runtime). Cancelling the reservation and
	// retrying instead made every waiting runtime run a full pass every
	// 1/rate seconds, racing for one token: with 100 runtimes 3 renewals/s
	// instead of 5 and ~70 SKR requests per runtime (vs-controller/bench
	// BenchmarkCARotation, docs/certificates.md).
	if v, ok := k.renewalSlots.Load(runtimeKey); ok {
		if wait := time.Until(v.(time.Time)); wait > 0 {
			return wait, nil
		}
	} else if d := k.Renewals.Reserve().Delay(); d > 0 {
		k.renewalSlots.Store(runtimeKey, time.Now().Add(d))
		return d, nil
	}
	k.renewalSlots.Delete(runtimeKey)
	requested, err := requestIssuing(ctx, k.Cache, crt)
	if err != nil {
		return 0, err
	}
	if requested {
		vsmetrics.RenewalsRequested.Inc()
		if k.Recorder != nil {
			k.Recorder.Eventf(kyma, nil, corev1.EventTypeNormal, ReasonRenewalRequested, "RequestRenewal",
				"%s", fmt.Sprintf("the runtime's SKR trusts CA %s: renewal of the runtime certificate (signed by %s) requested", Fingerprint(t.current), t.leaf.Issuer.CommonName))
		}
	}
	return 0, nil
}

// GatewayTrusts reports whether leaf chains to a CA of the published runtime
// trust bundle (the gateway's client CA); known is false while nothing is
// published yet.
func (k *Keeper) GatewayTrusts(leaf *x509.Certificate) (trusted, known bool) {
	p := k.current()
	if p == nil || p.runtimeBundle == nil {
		return false, false
	}
	return SignedBy(leaf, p.runtimeCAs) >= 0, true
}
