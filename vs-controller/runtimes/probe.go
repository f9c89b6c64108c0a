package runtimes

// The watch-path prober (health.Prober, docs/architecture.md §4.12): what
// the KCP can see of a runtime whose path the health evaluator looks at.
// Each of its two probes is an ordered chain of small named checks, after
// cert-manager's certificate trigger policies
// (pkg/controller/certificates/trigger/policies): the checks run in order,
// the first that finds a cause wins and the ones after it are not run (nor
// their reads made); an error ends the probe.
//
// Config (every check interval), configChecks:
//
//  1. webhookConfigMissing  webhook-config-missing
//  2. webhookConfigAltered  webhook-config-altered
//
// Silent (a runtime not heard), silenceChecks:
//
//  1. webhookSecretMissing         webhook-not-ready (no Secret skr-webhook-tls)
//  2. clientCertUnparsable         ca-untrusted
//  3. clientCertOutsideValidity    certificate-expired, certificate-not-yet-valid
//  4. clientCANotTrustedByGateway  ca-untrusted (the trust keeper's published bundle)
//  5. extAuthzDenies               unknown-runtime, san-mismatch, ca-untrusted
//  6. webhookNotReady              webhook-not-ready (no ready skr-webhook)
//  7. nothingHeard                 nothing-heard, always: the chain's last word
//
// A check reads what it needs through the probe, which reads each SKR
// object once per probe (the cost in docs/architecture.md §4.12).
// The certificate's causes come before the webhook's readiness: a webhook
// whose certificate the gateway or ext-authz refuses is silent whether it
// runs or not. Adding a cause is adding a check at its place in a chain,
// and a row to probe_test.go.

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// check is one link of a probe's chain: a Finding with a cause ends the
// chain, a healthy one hands the runtime to the next check.
type check func(ctx context.Context, p *probe) (health.Finding, error)

// chain is a probe's checks, in order.
type chain []check

// evaluate runs the checks in order until one finds a cause or fails.
func (c chain) evaluate(ctx context.Context, p *probe) (health.Finding, error) {
	for _, find := range c {
		if f, err := find(ctx, p); err != nil || !f.Healthy() {
			return f, err
		}
	}
	return health.Finding{}, nil
}

// configChecks: the SKR's ValidatingWebhookConfiguration skr-webhook.
var configChecks = chain{
	webhookConfigMissing,
	webhookConfigAltered,
}

// silenceChecks: why a runtime is not heard.
var silenceChecks = chain{
	webhookSecretMissing,
	clientCertUnparsable,
	clientCertOutsideValidity,
	clientCANotTrustedByGateway,
	extAuthzDenies,
	webhookNotReady,
	nothingHeard,
}

var _ health.Prober = (*Reconciler)(nil)

// Config checks the SKR's ValidatingWebhookConfiguration (configChecks):
// one metadata read when it is at the resourceVersion the bundle pass last
// applied or found up to date; otherwise a full read compared with the
// desired one.
func (r *Reconciler) Config(ctx context.Context, rt health.Runtime) (health.Finding, error) {
	p, err := r.newProbe(ctx, rt)
	if err != nil {
		return health.Finding{}, err
	}
	return configChecks.evaluate(ctx, p)
}

// Silent tells why a runtime is not heard, from what the KCP can see
// (silenceChecks): the client certificate in the SKR's Secret as the
// gateway and ext-authz would judge it (validity, the gateway's client CA
// bundle, SAN pinning with ext-authz's own Verifier over this cache), then
// the webhook's readiness in the SKR; nothing found is CauseNothingHeard.
func (r *Reconciler) Silent(ctx context.Context, rt health.Runtime) (health.Finding, error) {
	p, err := r.newProbe(ctx, rt)
	if err != nil {
		return health.Finding{}, err
	}
	return silenceChecks.evaluate(ctx, p)
}

// probe is one Config or Silent call: the runtime, its SKR client, and
// the SKR objects read so far (each read once, by the first check that
// needs it).
type probe struct {
	r   *Reconciler
	rt  health.Runtime
	skr client.Client

	configRead bool
	configMeta *metav1.PartialObjectMetadata // nil: none in the SKR
	secretRead bool
	secret     *corev1.Secret // nil: none in the SKR
}

func (r *Reconciler) newProbe(ctx context.Context, rt health.Runtime) (*probe, error) {
	skr, err := r.skrFor(ctx, rt)
	if err != nil {
		return nil, err
	}
	return &probe{r: r, rt: rt, skr: skr}, nil
}

// webhookConfigMeta is the metadata of the SKR's webhook configuration;
// nil when there is none.
func (p *probe) webhookConfigMeta(ctx context.Context) (*metav1.PartialObjectMetadata, error) {
	if !p.configRead {
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
		switch err := p.skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, meta); {
		case apierrors.IsNotFound(err):
			meta = nil
		case err != nil:
			return nil, skrclient.BoundedError(err)
		}
		p.configRead, p.configMeta = true, meta
	}
	return p.configMeta, nil
}

// webhookSecret is the SKR's Secret skr-webhook-tls; nil when there is
// none.
func (p *probe) webhookSecret(ctx context.Context) (*corev1.Secret, error) {
	if !p.secretRead {
		sec := &corev1.Secret{}
		switch err := p.skr.Get(ctx, client.ObjectKey{Namespace: p.r.Bundle.Namespace, Name: bundle.SecretName}, sec); {
		case apierrors.IsNotFound(err):
			sec = nil
		case err != nil:
			return nil, skrclient.BoundedError(err)
		}
		p.secretRead, p.secret = true, sec
	}
	return p.secret, nil
}

// clientCert is the client certificate (the first of tls.crt) of the
// SKR's Secret; nil when there is none or it cannot be parsed.
func (p *probe) clientCert(ctx context.Context) (*x509.Certificate, error) {
	sec, err := p.webhookSecret(ctx)
	if err != nil || sec == nil {
		return nil, err
	}
	if certs, _ := trust.ParseBundle(sec.Data[corev1.TLSCertKey]); len(certs) > 0 {
		return certs[0], nil
	}
	return nil, nil
}

var noWebhookConfig = health.Finding{Cause: health.CauseWebhookConfigMissing, Detail: "no ValidatingWebhookConfiguration " + bundle.Name + " in the SKR"}

// webhookConfigMissing: no ValidatingWebhookConfiguration skr-webhook in
// the SKR.
func webhookConfigMissing(ctx context.Context, p *probe) (health.Finding, error) {
	meta, err := p.webhookConfigMeta(ctx)
	if err != nil || meta != nil {
		return health.Finding{}, err
	}
	return noWebhookConfig, nil
}

// webhookConfigAltered: the webhook configuration differs from the desired
// one under the same hash annotation (or without one): someone else
// changed it. Known up to date at its resourceVersion, it is not read in
// full; another hash is vs-controller's own change (a Watcher, a CA
// rotation) still to be pushed, not a fault of the runtime.
func webhookConfigAltered(ctx context.Context, p *probe) (health.Finding, error) {
	meta, err := p.webhookConfigMeta(ctx)
	if err != nil || meta == nil {
		return health.Finding{}, err // none: webhookConfigMissing's
	}
	key := client.ObjectKey{Name: bundle.Name}
	memoKey := client.ObjectKeyFromObject(p.rt.Kyma).String() + "|" + bundle.ValidatingWebhookConfigurationGVK.Kind + "|" + key.String()
	if p.r.memo.KnownAt(memoKey, meta.GetResourceVersion()) {
		return health.Finding{}, nil
	}
	desired, err := p.r.desiredWebhookConfig(ctx, p.rt)
	if err != nil {
		return health.Finding{}, err
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
	if err := p.skr.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return noWebhookConfig, nil // gone since the metadata read
		}
		return health.Finding{}, skrclient.BoundedError(err)
	}
	if live.GetAnnotations()[diffapply.HashAnnotation] != desired.GetAnnotations()[diffapply.HashAnnotation] && live.GetAnnotations()[diffapply.HashAnnotation] != "" {
		return health.Finding{}, nil
	}
	ok, err := diffapply.UpToDate(desired, live)
	if err != nil {
		return health.Finding{}, err
	}
	if !ok {
		return health.Finding{Cause: health.CauseWebhookConfigAltered, Detail: "ValidatingWebhookConfiguration " + bundle.Name + " differs from the one vs-controller applied"}, nil
	}
	p.r.memo.Record(memoKey, live.GetResourceVersion(), desired.GetAnnotations()[diffapply.HashAnnotation])
	return health.Finding{}, nil
}

// webhookSecretMissing: no Secret skr-webhook-tls in the SKR; the webhook
// cannot run without it.
func webhookSecretMissing(ctx context.Context, p *probe) (health.Finding, error) {
	sec, err := p.webhookSecret(ctx)
	if err != nil || sec != nil {
		return health.Finding{}, err
	}
	return health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no Secret " + bundle.SecretName + " in the SKR"}, nil
}

// clientCertUnparsable: the Secret's tls.crt holds no certificate.
func clientCertUnparsable(ctx context.Context, p *probe) (health.Finding, error) {
	leaf, err := p.clientCert(ctx)
	if err != nil || leaf != nil {
		return health.Finding{}, err
	}
	return health.Finding{Cause: health.CauseCAUntrusted, Detail: "the SKR's client certificate cannot be parsed"}, nil
}

// clientCertOutsideValidity: the client certificate expired, or is not
// valid yet.
func clientCertOutsideValidity(ctx context.Context, p *probe) (health.Finding, error) {
	leaf, err := p.clientCert(ctx)
	if err != nil || leaf == nil {
		return health.Finding{}, err
	}
	switch now := time.Now(); {
	case now.After(leaf.NotAfter):
		return health.Finding{Cause: health.CauseCertificateExpired, Detail: "the SKR's client certificate expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)}, nil
	case now.Before(leaf.NotBefore):
		return health.Finding{Cause: health.CauseCertificateNotYetValid, Detail: "the SKR's client certificate is valid from " + leaf.NotBefore.UTC().Format(time.RFC3339)}, nil
	}
	return health.Finding{}, nil
}

// clientCANotTrustedByGateway: the client certificate is not signed by a
// CA of the gateway's client CA bundle, as the trust keeper published it.
// Not judged without a keeper, or before it published a bundle.
func clientCANotTrustedByGateway(ctx context.Context, p *probe) (health.Finding, error) {
	leaf, err := p.clientCert(ctx)
	if err != nil || leaf == nil || p.r.Trust == nil {
		return health.Finding{}, err
	}
	if trusted, known := p.r.Trust.GatewayTrusts(leaf); known && !trusted {
		return health.Finding{Cause: health.CauseCAUntrusted, Detail: "the SKR's client certificate (issuer " + leaf.Issuer.String() + ") is not signed by a CA of the gateway's client CA bundle"}, nil
	}
	return health.Finding{}, nil
}

// extAuthzDenies: ext-authz's own Verifier over this cache's Kymas denies
// the client certificate — unknown-runtime, san-mismatch (a missing
// skr-domain too), any other denial ca-untrusted. A lookup that fails is
// no denial: the next check goes on.
func extAuthzDenies(ctx context.Context, p *probe) (health.Finding, error) {
	leaf, err := p.clientCert(ctx)
	if err != nil || leaf == nil {
		return health.Finding{}, err
	}
	v := identity.Verifier{Lookup: identity.NewKymaLookup(p.r.Client, p.r.KymaNamespace)}
	xfcc := `Cert="` + url.QueryEscape(string(pemOf(leaf))) + `"`
	_, err = v.Verify(ctx, xfcc, "")
	var d *identity.Denial
	if !errors.As(err, &d) {
		return health.Finding{}, nil
	}
	switch d.Reason {
	case contract.ReasonUnknownRuntime:
		return health.Finding{Cause: health.CauseUnknownRuntime, Detail: "ext-authz would deny: " + d.Error()}, nil
	case contract.ReasonSANMismatch, contract.ReasonDomainNotSet:
		return health.Finding{Cause: health.CauseSANMismatch, Detail: "ext-authz would deny: " + d.Error()}, nil
	default:
		return health.Finding{Cause: health.CauseCAUntrusted, Detail: "ext-authz would deny: " + d.Error()}, nil
	}
}

// webhookNotReady: no ready skr-webhook in the SKR, as the take-over
// judges it (Adoption.Ready, the Deployment's ready replicas by default),
// the webhook's serving certificate verified with the runtime CA bundle.
func webhookNotReady(ctx context.Context, p *probe) (health.Finding, error) {
	r := p.r
	ready := r.Adoption.Ready
	if ready == nil {
		ready = takeover.DeploymentReady
	}
	tls, err := certificates.Issued(ctx, r.Client, r.KymaNamespace, p.rt.ID)
	if err != nil || tls == nil {
		return health.Finding{}, fmt.Errorf("runtime certificate not issued: %w", err)
	}
	ok, err := ready(ctx, p.skr, client.ObjectKey{Namespace: r.Bundle.Namespace, Name: bundle.Name}, &certificates.TLS{CA: r.runtimeCABundle(ctx, p.rt.ID, tls), Cert: tls.Cert, Key: tls.Key})
	if err != nil {
		return health.Finding{}, skrclient.BoundedError(err)
	}
	if !ok {
		return health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no ready skr-webhook in the SKR"}, nil
	}
	return health.Finding{}, nil
}

// nothingHeard: nothing the KCP can see explains the silence.
func nothingHeard(context.Context, *probe) (health.Finding, error) {
	return health.Finding{Cause: health.CauseNothingHeard, Detail: "certificate, trust, pinning, webhook configuration and readiness look right from the KCP: the SKR does not reach the gateway (network, DNS, egress)"}, nil
}

// desiredWebhookConfig is the runtime's desired webhook configuration, as
// its bundle pass builds it.
func (r *Reconciler) desiredWebhookConfig(ctx context.Context, rt health.Runtime) (*unstructured.Unstructured, error) {
	tls, err := certificates.Issued(ctx, r.Client, r.KymaNamespace, rt.ID)
	if err != nil || tls == nil {
		return nil, fmt.Errorf("runtime certificate not issued: %w", err)
	}
	objs, err := r.desiredBundle(ctx, tls, r.runtimeCABundle(ctx, rt.ID, tls))
	if err != nil {
		return nil, err
	}
	for _, o := range objs {
		if o.GroupVersionKind() == bundle.ValidatingWebhookConfigurationGVK {
			return o, nil
		}
	}
	return nil, errors.New("no webhook configuration in the desired bundle")
}

// runtimeCABundle is the runtime CA bundle (every CA valid now) the
// webhook's serving certificate is verified with; the certificate's own
// ca.crt without the trust keeper.
func (r *Reconciler) runtimeCABundle(ctx context.Context, id string, tls *certificates.TLS) []byte {
	if r.Trust == nil {
		return tls.CA
	}
	certs, _ := trust.ParseBundle(tls.Cert)
	if len(certs) == 0 {
		return tls.CA
	}
	if t, ok := r.Trust.RuntimeTrust(ctx, id, certs[0], tls.CA); ok {
		return t.CABundle
	}
	return tls.CA
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}
