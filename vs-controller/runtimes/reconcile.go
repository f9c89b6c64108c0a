package runtimes

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// Reconcile brings one runtime's Certificate and SKR bundle up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (res ctrl.Result, err error) {
	ctx, done, ok := r.Shards.Begin(ctx, req.String())
	if !ok {
		// Another replica owns the runtime (its gain requeues it there).
		recordOutcome("not-owner")
		return ctrl.Result{}, nil
	}
	defer done()
	kyma := NewKyma()
	if err := r.Client.Get(ctx, req.NamespacedName, kyma); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	kyma.SetGroupVersionKind(kymaGVK)
	id := RuntimeID(kyma)
	domain := kyma.GetAnnotations()[contract.AnnotationSKRDomain]
	if kyma.GetDeletionTimestamp() != nil || domain == "" {
		// A Kyma without skr-domain is none of our business; if it had
		// one before, its bundle goes.
		return ctrl.Result{}, r.finalize(ctx, kyma)
	}
	if err := certificates.ValidRuntimeID(id); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonInvalidRuntime, err.Error())
		return ctrl.Result{}, nil
	}
	kubeconfig, err := r.kubeconfig(ctx, req.String(), id)
	if err != nil {
		return ctrl.Result{}, err
	}
	if kubeconfig == nil {
		// No kubeconfig Secret (yet): the creation of a labelled one
		// triggers the next pass, an unlabelled one is found by this retry.
		return ctrl.Result{RequeueAfter: r.KubeconfigRetry}, nil
	}

	if !controllerutil.ContainsFinalizer(kyma, Finalizer) {
		orig := kyma.DeepCopy()
		controllerutil.AddFinalizer(kyma, Finalizer)
		if err := r.Client.Patch(ctx, kyma, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		recordWrite("kyma-finalizer")
		kyma.SetGroupVersionKind(kymaGVK)
	}

	if err := r.ensureCertificate(ctx, kyma, id, domain); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonCertificate, err.Error())
		return ctrl.Result{}, err
	}
	tls, err := certificates.Issued(ctx, r.Client, r.KymaNamespace, id)
	if err != nil || tls == nil {
		// Not issued yet: the Secret's creation triggers the next pass.
		return ctrl.Result{}, err
	}

	trusted, ok := r.trustFor(ctx, kyma, id, tls)
	if !ok {
		return ctrl.Result{RequeueAfter: trust.Wait}, nil
	}

	skr, err := r.Clients.For(ctx, req.String(), kubeconfig)
	if err != nil {
		// A kubeconfig we refuse or cannot parse: retrying does not help,
		// a change of its Secret triggers the next pass.
		r.event(kyma, corev1.EventTypeWarning, ReasonInvalidKubeconfig, err.Error())
		recordOutcome("invalid-kubeconfig")
		return ctrl.Result{}, nil
	}
	btls := &certificates.TLS{CA: trusted.GatewayCA, Cert: tls.Cert, Key: tls.Key}
	proceed, res, err := r.TakeOver.Adopt(ctx, kyma, req.String(), skr, btls, trusted.CABundle)
	if err == nil && !proceed {
		return res, nil
	}
	wrote := 0
	if err == nil {
		wrote, err = r.applyBundle(ctx, req.String(), skr, btls, trusted.CABundle)
	}
	// SKR API errors carry text the runtime writes (its admission
	// webhooks' messages): cut before it reaches Events and logs.
	err = skrclient.BoundedError(err)
	if err != nil {
		reason := ReasonBundleFailed
		if isUnreachable(err) {
			reason = ReasonUnreachable
			recordOutcome("unreachable")
		} else {
			recordOutcome("failed")
		}
		r.event(kyma, corev1.EventTypeWarning, reason, err.Error())
		return ctrl.Result{}, err
	}
	r.bundled.LoadOrStore(req.String(), time.Now())
	if wrote > 0 {
		recordOutcome("applied")
		r.event(kyma, corev1.EventTypeNormal, ReasonBundleApplied, fmt.Sprintf("applied %d object(s) of the SKR bundle", wrote))
	} else {
		recordOutcome("unchanged")
	}
	if r.Retirer != nil {
		// The SKR holds tls.Cert now: what is older may be retired.
		if wait, err := r.Retirer.AfterDelivery(ctx, kyma, id, leafOf(tls)); err != nil {
			return ctrl.Result{}, err
		} else if wait > 0 {
			defer func() {
				if err == nil {
					res.RequeueAfter = minPositive(res.RequeueAfter, wait)
				}
			}()
		}
	}
	if r.Trust != nil {
		if wait, err := r.Trust.AfterPush(ctx, kyma, req.String(), id, trusted); err != nil || wait > 0 {
			return ctrl.Result{RequeueAfter: wait}, err
		}
	}
	// The readiness check verifies our webhook with the runtime CA bundle
	// (btls.CA is the gateway's, for the SKR's ca.crt).
	if res, err := r.TakeOver.Finish(ctx, kyma, req.String(), skr, &certificates.TLS{CA: trusted.CABundle, Cert: tls.Cert, Key: tls.Key}); err != nil || res.RequeueAfter > 0 {
		return res, skrclient.BoundedError(err)
	}
	if r.Resync > 0 {
		return ctrl.Result{RequeueAfter: r.Resync}, nil
	}
	return ctrl.Result{}, nil
}

// leafOf is the certificate of tls (nil when unparsable).
func leafOf(tls *certificates.TLS) *x509.Certificate {
	if certs, _ := trust.ParseBundle(tls.Cert); len(certs) > 0 {
		return certs[0]
	}
	return nil
}

// minPositive is the shorter of two requeue delays, 0 meaning none.
func minPositive(a, b time.Duration) time.Duration {
	if a <= 0 || b > 0 && b < a {
		return b
	}
	return a
}

// ensureCertificate writes the runtime's Certificate when it differs from
// the desired one.
func (r *Reconciler) ensureCertificate(ctx context.Context, kyma client.Object, id, domain string) error {
	dnsNames := append(r.Bundle.ServiceDNSNames(), r.ExtraDNSNames...)
	crt := certificates.Desired(kyma, id, domain, r.Issuer, dnsNames)
	// Which replica keeps the runtime: written when that changes (the
	// label is part of the desired object's hash), not at every pass.
	r.Shards.LabelOwned(crt)
	if r.CertificateDuration > 0 {
		crt.Spec.Duration = &metav1.Duration{Duration: r.CertificateDuration}
	}
	if r.CertificateRenewBefore > 0 {
		crt.Spec.RenewBefore = &metav1.Duration{Duration: r.CertificateRenewBefore}
	}
	desired, err := diffapply.Desired(crt, certificates.GVK)
	if err != nil {
		return err
	}
	var live client.Object
	cur := &certmanagerv1.Certificate{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}, cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		live = cur
	}
	wrote, err := diffapply.Ensure(ctx, r.Client, FieldOwner, desired, live)
	if wrote {
		recordWrite("certificate")
	}
	return err
}

// desiredBundle is the SKR bundle in apply order, its webhook configuration
// and managers ConfigMap built from all Watchers, with caBundle; tls.CA is the Secret's ca.crt.
func (r *Reconciler) desiredBundle(ctx context.Context, tls *certificates.TLS, caBundle []byte) ([]*unstructured.Unstructured, error) {
	trusted, err := r.trustedWatchers(ctx)
	if err != nil {
		return nil, err
	}
	vwc, err := r.webhooks.Desired(r.Bundle, trusted, caBundle)
	if err != nil {
		return nil, err
	}
	return r.bundles.Desired(r.Bundle, *tls, trusted, vwc)
}

// trustedWatchers are the Watchers the bundle is built from, each with the
// route it holds as the VirtualServices vs-controller owns say, never as a
// Watcher's status (writable by its author) says.
func (r *Reconciler) trustedWatchers(ctx context.Context) ([]v1beta2.Watcher, error) {
	var watchers v1beta2.WatcherList
	if err := r.Client.List(ctx, &watchers, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	holders, err := routeowner.RouteHolders(ctx, r.Client)
	if err != nil {
		return nil, err
	}
	return routeowner.TrustRoutes(watchers.Items, holders), nil
}

// applyBundle writes the bundle objects that differ from the SKR's and
// returns how many it wrote. An object known to be up to date at its
// current resourceVersion costs one metadata read; others are read in full
// and compared.
func (r *Reconciler) applyBundle(ctx context.Context, runtimeKey string, skr client.Client, tls *certificates.TLS, caBundle []byte) (int, error) {
	objs, err := r.desiredBundle(ctx, tls, caBundle)
	if err != nil {
		return 0, err
	}
	return r.applyObjects(ctx, runtimeKey, skr, objs)
}

// applyObjects writes those of objs that differ from the SKR's.
func (r *Reconciler) applyObjects(ctx context.Context, runtimeKey string, skr client.Client, objs []*unstructured.Unstructured) (int, error) {
	wrote := 0
	for _, desired := range objs {
		key := client.ObjectKeyFromObject(desired)
		memoKey := runtimeKey + "|" + desired.GetKind() + "|" + key.String()
		hash := desired.GetAnnotations()[diffapply.HashAnnotation]
		readErr := func(err error) error {
			return fmt.Errorf("read %s %s in the runtime: %w", desired.GetKind(), key, err)
		}

		var live client.Object
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(desired.GroupVersionKind())
		switch err := skr.Get(ctx, key, meta); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return wrote, readErr(err)
		case r.memo.Known(memoKey, meta.GetResourceVersion(), hash):
			continue
		default:
			full := &unstructured.Unstructured{}
			full.SetGroupVersionKind(desired.GroupVersionKind())
			if err := skr.Get(ctx, key, full); err != nil && !apierrors.IsNotFound(err) {
				return wrote, readErr(err)
			} else if err == nil {
				live = full
			}
		}
		ok, err := diffapply.UpToDate(desired, live)
		if err != nil {
			return wrote, err
		}
		if ok {
			r.memo.Record(memoKey, live.GetResourceVersion(), hash)
			continue
		}
		rv, err := diffapply.Apply(ctx, skr, FieldOwner, desired)
		if err != nil {
			return wrote, err
		}
		r.memo.Record(memoKey, rv, hash)
		wrote++
		recordWrite("skr-" + strings.ToLower(desired.GetKind()))
	}
	return wrote, nil
}

func (r *Reconciler) event(kyma runtime.Object, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(kyma, nil, typ, reason, "Reconcile", "%s", skrclient.Bounded(msg))
	}
}

func recordWrite(kind string) { vsmetrics.RuntimeWrites.WithLabelValues(kind).Inc() }

func recordOutcome(result string) { vsmetrics.RuntimeReconciles.WithLabelValues(result).Inc() }

// isUnreachable tells network and timeout failures from API errors.
func isUnreachable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err)
	}
	return true
}
