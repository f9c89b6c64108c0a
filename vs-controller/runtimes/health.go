package runtimes

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/url"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

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

// Config checks the SKR's ValidatingWebhookConfiguration: one metadata
// read when it is at the resourceVersion the bundle pass last applied or
// found up to date; otherwise a full read compared with the desired one.
func (r *Reconciler) Config(ctx context.Context, rt health.Runtime) (health.Finding, error) {
	skr, err := r.skrFor(ctx, rt)
	if err != nil {
		return health.Finding{}, err
	}
	key := client.ObjectKey{Name: bundle.Name}
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
	switch err := skr.Get(ctx, key, meta); {
	case apierrors.IsNotFound(err):
		return health.Finding{Cause: health.CauseWebhookConfigMissing, Detail: "no ValidatingWebhookConfiguration " + bundle.Name + " in the SKR"}, nil
	case err != nil:
		return health.Finding{}, skrclient.BoundedError(err)
	}
	memoKey := client.ObjectKeyFromObject(rt.Kyma).String() + "|" + bundle.ValidatingWebhookConfigurationGVK.Kind + "|" + key.String()
	if r.memo.KnownAt(memoKey, meta.GetResourceVersion()) {
		return health.Finding{}, nil
	}
	desired, err := r.desiredWebhookConfig(ctx, rt)
	if err != nil {
		return health.Finding{}, err
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
	if err := skr.Get(ctx, key, live); err != nil {
		if apierrors.IsNotFound(err) {
			return health.Finding{Cause: health.CauseWebhookConfigMissing, Detail: "no ValidatingWebhookConfiguration " + bundle.Name + " in the SKR"}, nil
		}
		return health.Finding{}, skrclient.BoundedError(err)
	}
	// Another hash than the desired one: vs-controller's intent changed (a
	// Watcher, a CA rotation) and its bundle pass has yet to push it; not
	// a fault of the runtime. The same hash with other content: someone
	// else changed it.
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
	r.memo.Record(memoKey, live.GetResourceVersion(), desired.GetAnnotations()[diffapply.HashAnnotation])
	return health.Finding{}, nil
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

// Silent tells why a runtime is not heard, from what the KCP can see: the
// client certificate in the SKR's Secret as the gateway and ext-authz
// would judge it (validity, the gateway's client CA bundle, SAN pinning
// with ext-authz's own Verifier over this cache), then the webhook's
// readiness in the SKR; nothing found is CauseNothingHeard.
func (r *Reconciler) Silent(ctx context.Context, rt health.Runtime) (health.Finding, error) {
	skr, err := r.skrFor(ctx, rt)
	if err != nil {
		return health.Finding{}, err
	}
	sec := &corev1.Secret{}
	switch err := skr.Get(ctx, client.ObjectKey{Namespace: r.Bundle.Namespace, Name: bundle.SecretName}, sec); {
	case apierrors.IsNotFound(err):
		return health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no Secret " + bundle.SecretName + " in the SKR"}, nil
	case err != nil:
		return health.Finding{}, skrclient.BoundedError(err)
	}
	if f, done := r.judgeCertificate(ctx, sec.Data[corev1.TLSCertKey]); done {
		return f, nil
	}
	ready := r.Adoption.Ready
	if ready == nil {
		ready = takeover.DeploymentReady
	}
	tls, err := certificates.Issued(ctx, r.Client, r.KymaNamespace, rt.ID)
	if err != nil || tls == nil {
		return health.Finding{}, fmt.Errorf("runtime certificate not issued: %w", err)
	}
	ok, err := ready(ctx, skr, client.ObjectKey{Namespace: r.Bundle.Namespace, Name: bundle.Name}, &certificates.TLS{CA: r.runtimeCABundle(ctx, rt.ID, tls), Cert: tls.Cert, Key: tls.Key})
	if err != nil {
		return health.Finding{}, skrclient.BoundedError(err)
	}
	if !ok {
		return health.Finding{Cause: health.CauseWebhookNotReady, Detail: "no ready skr-webhook in the SKR"}, nil
	}
	return health.Finding{Cause: health.CauseNothingHeard, Detail: "certificate, trust, pinning, webhook configuration and readiness look right from the KCP: the SKR does not reach the gateway (network, DNS, egress)"}, nil
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

// judgeCertificate judges the SKR's client certificate as the gateway and
// ext-authz would; done is false when they would let it pass.
func (r *Reconciler) judgeCertificate(ctx context.Context, pemBytes []byte) (health.Finding, bool) {
	certs, _ := trust.ParseBundle(pemBytes)
	if len(certs) == 0 {
		return health.Finding{Cause: health.CauseCAUntrusted, Detail: "the SKR's client certificate cannot be parsed"}, true
	}
	leaf, now := certs[0], time.Now()
	switch {
	case now.After(leaf.NotAfter):
		return health.Finding{Cause: health.CauseCertificateExpired, Detail: "the SKR's client certificate expired at " + leaf.NotAfter.UTC().Format(time.RFC3339)}, true
	case now.Before(leaf.NotBefore):
		return health.Finding{Cause: health.CauseCertificateNotYetValid, Detail: "the SKR's client certificate is valid from " + leaf.NotBefore.UTC().Format(time.RFC3339)}, true
	}
	if r.Trust != nil {
		if trusted, known := r.Trust.GatewayTrusts(leaf); known && !trusted {
			return health.Finding{Cause: health.CauseCAUntrusted, Detail: "the SKR's client certificate (issuer " + leaf.Issuer.String() + ") is not signed by a CA of the gateway's client CA bundle"}, true
		}
	}
	v := identity.Verifier{Lookup: identity.NewKymaLookup(r.Client, r.KymaNamespace)}
	xfcc := `Cert="` + url.QueryEscape(string(pemOf(leaf))) + `"`
	if _, err := v.Verify(ctx, xfcc, ""); err != nil {
		var d *identity.Denial
		if !errors.As(err, &d) {
			return health.Finding{}, false
		}
		switch d.Reason {
		case contract.ReasonUnknownRuntime:
			return health.Finding{Cause: health.CauseUnknownRuntime, Detail: "ext-authz would deny: " + d.Error()}, true
		case contract.ReasonSANMismatch, contract.ReasonDomainNotSet:
			return health.Finding{Cause: health.CauseSANMismatch, Detail: "ext-authz would deny: " + d.Error()}, true
		default:
			return health.Finding{Cause: health.CauseCAUntrusted, Detail: "ext-authz would deny: " + d.Error()}, true
		}
	}
	return health.Finding{}, false
}

func pemOf(c *x509.Certificate) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
}

var _ health.Prober = (*Reconciler)(nil)
