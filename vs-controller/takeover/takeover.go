// Package takeover takes over runtimes whose SKR Lifecycle Manager (LM)
// set up, without a gap in admission coverage
// (docs/migrating-from-lifecycle-manager.md). The runtime reconciler
// (package runtimes) calls Adopt before its bundle pass and Finish after
// it; the take-over uses the reconciler's bundle through the Bundle
// interface.
//
// A pass that finds LM's objects in the SKR (bundle.FindLifecycleManager):
//  1. waits unless LM is stopped for this runtime (the Kyma's label
//     operator.kyma-project.io/skip-reconciliation: "true") or
//     Options.WithoutSkipReconciliation is set: LM re-applies its objects
//     by kind and name with forced server-side apply, so fighting it would
//     be an endless loop;
//  2. brings up our webhook beside LM's under other names (Deployment
//     skr-webhook-takeover with Secret skr-webhook-takeover-tls: LM's
//     Deployment selector and Secret type are immutable);
//  3. waits until Options.Ready says that webhook serves;
//  4. switches admission: adds our CA to LM's webhook configuration (so
//     both webhooks are trusted behind the Service), points the Service
//     skr-webhook at our pods, then replaces the webhook configuration with
//     ours — each one Update, dropping LM's field ownership;
//  5. deletes LM's other objects (Deployment, Secret, metrics Service,
//     PriorityClass, NetworkPolicies).
//
// The normal bundle pass then creates our skr-webhook Deployment and
// Secret; once that Deployment is ready (Finish) the take-over objects go.
// The take-over condition on the Kyma says where a runtime is
// (condition.go).
package takeover

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net/http"
	"sync"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

const (
	// SkipReconciliationLabel on a KCP Kyma stops LM for that runtime.
	SkipReconciliationLabel = "operator.kyma-project.io/skip-reconciliation"
	// LMFieldManager is LM's server-side apply field manager.
	LMFieldManager = "lifecycle-manager"

	// Event reasons of the take-over.
	ReasonLMActive      = "LifecycleManagerActive"
	ReasonAdoptionWaits = "AdoptionWaitingForWebhook"
	ReasonAdopted       = "LifecycleManagerAdopted"
	ReasonAdoptionDone  = "AdoptionCompleted"

	defaultAdoptionPoll = 5 * time.Second
	probeTimeout        = 3 * time.Second
)

// ReadyFunc tells whether the webhook of a Deployment in the runtime serves.
// tls is the runtime's certificate (its CA verifies the webhook).
type ReadyFunc func(ctx context.Context, skr client.Client, deployment client.ObjectKey, tls *certificates.TLS) (bool, error)

// Options configure the take-over of runtimes LM set up.
type Options struct {
	// WithoutSkipReconciliation adopts even when the Kyma lacks
	// SkipReconciliationLabel (LM stopped some other way, e.g. scaled to 0).
	WithoutSkipReconciliation bool
	// Ready checks our webhook before admission is switched to it;
	// DeploymentReady when nil.
	Ready ReadyFunc
	// Poll is how often a waiting take-over is re-checked; 5s when 0.
	Poll time.Duration
}

// DeploymentReady: the Deployment has at least one ready replica.
func DeploymentReady(ctx context.Context, skr client.Client, key client.ObjectKey, _ *certificates.TLS) (bool, error) {
	d := &appsv1.Deployment{}
	if err := skr.Get(ctx, key, d); err != nil {
		return false, client.IgnoreNotFound(err)
	}
	return d.Status.ReadyReplicas >= 1, nil
}

// URLReady is a ReadyFunc for runtimes whose webhook does not run as pods
// (the local environment: a process behind --skr-webhook-url): ready when
// url answers over TLS verified with the runtime's CA. The Deployment is
// not consulted.
func URLReady(url string) ReadyFunc {
	return func(ctx context.Context, _ client.Client, _ client.ObjectKey, t *certificates.TLS) (bool, error) {
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(t.CA) {
			return false, fmt.Errorf("runtime CA: no certificate")
		}
		c := &http.Client{Timeout: probeTimeout, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12},
		}}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := c.Do(req)
		if err != nil {
			return false, nil // not serving (yet), or not with our certificate
		}
		_ = resp.Body.Close()
		return true, nil
	}
}

// Bundle is what the take-over uses of the runtime reconciler: the SKR
// bundle it keeps, and its writes.
type Bundle interface {
	// Desired is the runtime's SKR bundle in apply order for the runtime
	// certificate tls (tls.CA: the Secret's ca.crt) and the webhook
	// configuration's caBundle.
	Desired(ctx context.Context, tls *certificates.TLS, caBundle []byte) ([]*unstructured.Unstructured, error)
	// Apply writes those of objs that differ from the SKR's and returns
	// how many it wrote.
	Apply(ctx context.Context, runtimeKey string, skr client.Client, objs []*unstructured.Unstructured) (int, error)
	// ForgetApplied forgets what the runtime's SKR is known to hold (the
	// take-over changed it behind Apply's back).
	ForgetApplied(runtimeKey string)
}

// TakeOver takes over runtimes LM set up. Safe for concurrent use by the
// reconciler's workers (one runtime at a time each).
type TakeOver struct {
	Options
	// Client of the KCP (the manager's cached client): writes the Kyma's
	// status.
	Client client.Client
	// APIReader reads Kymas in full (uncached); Client when nil.
	APIReader client.Reader
	// Recorder reports the take-over's steps on the Kyma; none when nil.
	Recorder events.EventRecorder
	// Bundle shapes the SKR objects (the names of LM's and ours).
	Bundle bundle.Options
	// SKR is the runtime reconciler's bundle.
	SKR Bundle
	// Resync: a runtime waiting for LM to be stopped is looked at again
	// after this long; only on a change of its Kyma when not positive.
	Resync time.Duration

	adopted sync.Map // runtime key -> true: no LM or take-over objects seen
	lmCerts lmCertificates
	// conditions: runtime key -> the take-over condition last found or
	// written on its Kyma (condition.go).
	conditions sync.Map
}

// Forget drops what is known of a runtime (removed).
func (r *TakeOver) Forget(runtimeKey string) {
	r.adopted.Delete(runtimeKey)
	r.lmCerts.forget(runtimeKey)
	r.conditions.Delete(runtimeKey)
}

func (r *TakeOver) event(kyma runtime.Object, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Eventf(kyma, nil, typ, reason, "TakeOver", "%s", skrclient.Bounded(msg))
	}
}

func (r *TakeOver) ready() ReadyFunc {
	if r.Ready != nil {
		return r.Ready
	}
	return DeploymentReady
}

func (r *TakeOver) poll() ctrl.Result {
	if r.Poll > 0 {
		return ctrl.Result{RequeueAfter: r.Poll}
	}
	return ctrl.Result{RequeueAfter: defaultAdoptionPoll}
}

// Adopt runs before the bundle pass. It reports whether the bundle pass may
// run; when not, res says when to look again.
func (r *TakeOver) Adopt(ctx context.Context, kyma client.Object, runtimeKey string, skr client.Client, t *certificates.TLS, caBundle []byte) (proceed bool, res ctrl.Result, err error) {
	if _, clean := r.adopted.Load(runtimeKey); clean {
		return true, ctrl.Result{}, nil
	}
	lm, err := bundle.FindLifecycleManager(ctx, skr, r.Bundle)
	if err != nil || len(lm) == 0 {
		if err == nil {
			r.lmCerts.forget(runtimeKey)
		}
		return err == nil, ctrl.Result{}, err
	}
	onLM := ""
	for _, ref := range lm {
		if ref.GVK == bundle.SecretGVK {
			issuer, err := lmCertificateIssuer(ctx, skr, ref.Key)
			if err != nil {
				return false, ctrl.Result{}, fmt.Errorf("read Lifecycle Manager's Secret %s: %w", ref.Key, err)
			}
			r.lmCerts.set(runtimeKey, lmCertificate{runtimeID: identity.RuntimeIDOf(kyma), kyma: kyma.GetName(), issuer: issuer})
			onLM = fmt.Sprintf("; its webhook still uses LM's certificate, issued by %q", issuer)
		}
	}
	if onLM == "" {
		r.lmCerts.forget(runtimeKey)
	}
	if !r.WithoutSkipReconciliation && kyma.GetLabels()[SkipReconciliationLabel] != "true" {
		// The message must not change from pass to pass (no object
		// counts): the condition is written only when it changes.
		if err := r.setTakeOverCondition(ctx, kyma, runtimeKey, takeOverCondition(metav1.ConditionFalse, CondReasonWaitingForLM, fmt.Sprintf(
			"Lifecycle Manager's skr-webhook is in the runtime%s, and LM is not stopped for it: label this Kyma %s=true to start the take-over",
			onLM, SkipReconciliationLabel))); err != nil {
			return false, ctrl.Result{}, err
		}
		r.event(kyma, corev1.EventTypeWarning, ReasonLMActive, fmt.Sprintf(
			"Lifecycle Manager's skr-webhook is in the runtime (%d object(s))%s, and LM is not stopped for it: label this Kyma %s=true; the take-over waits",
			len(lm), onLM, SkipReconciliationLabel))
		vsmetrics.Adoptions.WithLabelValues("lm-active").Inc()
		// The label's arrival triggers the next pass (the runtime reconciler watches it); the
		// resync looks again in case LM's objects go another way.
		if r.Resync > 0 {
			return false, ctrl.Result{RequeueAfter: r.Resync}, nil
		}
		return false, ctrl.Result{}, nil
	}
	// Errors are reported by Reconcile like the bundle pass's
	// (RuntimeUnreachable or SKRBundleFailed).
	fail := func(err error) (bool, ctrl.Result, error) {
		vsmetrics.Adoptions.WithLabelValues("failed").Inc()
		return false, ctrl.Result{}, fmt.Errorf("take over from Lifecycle Manager: %w", err)
	}

	if err := r.setTakeOverCondition(ctx, kyma, runtimeKey, takeOverCondition(metav1.ConditionFalse, CondReasonAdopting,
		"Lifecycle Manager is stopped for the runtime: runtime-watcher's skr-webhook is brought up beside LM's, admission switches to it once it is ready; until then the runtime's webhook posts with LM's certificate")); err != nil {
		return fail(err)
	}

	// 2. Our webhook beside LM's.
	ns, err := bundle.Namespace(r.Bundle)
	if err != nil {
		return fail(err)
	}
	dep, err := bundle.TakeoverDeployment(r.Bundle)
	if err != nil {
		return fail(err)
	}
	var managers []*unstructured.Unstructured
	all, err := r.SKR.Desired(ctx, t, caBundle)
	if err != nil {
		return fail(err)
	}
	var svc, vwc *unstructured.Unstructured
	for _, u := range all {
		switch {
		case u.GetKind() == bundle.ConfigMapGVK.Kind:
			managers = append(managers, u) // the managers file
		case u.GetKind() == bundle.ServiceGVK.Kind:
			svc = u
		case u.GetKind() == bundle.ValidatingWebhookConfigurationGVK.Kind:
			vwc = u
		}
	}
	objs := []struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{{ns, bundle.NamespaceGVK}, {bundle.TakeoverSecret(r.Bundle, *t), bundle.SecretGVK}, {dep, bundle.DeploymentGVK}}
	side := make([]*unstructured.Unstructured, 0, len(objs)+len(managers))
	for _, o := range objs {
		u, err := diffapply.Desired(o.obj, o.gvk)
		if err != nil {
			return fail(err)
		}
		side = append(side, u)
		if o.gvk == bundle.SecretGVK {
			side = append(side, managers...)
		}
	}
	if _, err := r.SKR.Apply(ctx, runtimeKey, skr, side); err != nil {
		return fail(err)
	}

	// 3. Wait for it.
	ok, err := r.ready()(ctx, skr, client.ObjectKeyFromObject(dep), &certificates.TLS{CA: caBundle, Cert: t.Cert, Key: t.Key})
	if err != nil {
		return fail(err)
	}
	if !ok {
		r.event(kyma, corev1.EventTypeNormal, ReasonAdoptionWaits,
			fmt.Sprintf("taking over from Lifecycle Manager: waiting for Deployment %s/%s to be ready before admission is switched", dep.Namespace, dep.Name))
		vsmetrics.Adoptions.WithLabelValues("waiting-for-webhook").Inc()
		return false, r.poll(), nil
	}

	// 4. Switch admission: CA first, then the Service, then the webhooks.
	if err := r.trustOurCA(ctx, skr, caBundle); err != nil {
		return fail(err)
	}
	for _, desired := range []*unstructured.Unstructured{svc, vwc} {
		if err := replaceLifecycleManagers(ctx, skr, desired); err != nil {
			return fail(err)
		}
		vsmetrics.RuntimeWrites.WithLabelValues("skr-adopt-" + desired.GetKind()).Inc()
	}

	// 5. LM's other objects.
	removed := 0
	for _, ref := range lm {
		if ref.GVK == bundle.ServiceGVK && ref.Key.Name == bundle.Name || ref.GVK == bundle.ValidatingWebhookConfigurationGVK {
			continue // taken over above
		}
		gone, err := deleteIfLifecycleManagers(ctx, skr, ref)
		if err != nil {
			return fail(err)
		}
		if gone {
			removed++
		}
	}
	// The metrics first: whoever sees the Event sees them counted.
	vsmetrics.Adoptions.WithLabelValues("switched").Inc()
	r.lmCerts.forget(runtimeKey)
	r.event(kyma, corev1.EventTypeNormal, ReasonAdopted, fmt.Sprintf(
		"took over from Lifecycle Manager: admission switched to runtime-watcher's skr-webhook, %d object(s) of LM removed", removed))
	r.SKR.ForgetApplied(runtimeKey)
	if err := r.setTakeOverCondition(ctx, kyma, runtimeKey, takenOver); err != nil {
		// finishAdoption sets it again while the take-over objects remain.
		log.FromContext(ctx).Error(err, "take over from Lifecycle Manager")
	}
	return true, ctrl.Result{}, nil
}

// takenOver is the condition of a runtime whose admission is switched.
var takenOver = takeOverCondition(metav1.ConditionTrue, CondReasonTakenOver,
	"admission is switched to runtime-watcher's skr-webhook and Lifecycle Manager's objects are removed from the runtime: its webhook posts with runtime-watcher's certificate")

// Finish runs after a successful bundle pass: once our skr-webhook
// Deployment is ready it removes the take-over objects, then remembers the
// runtime as clean (no more reads for LM's objects until it is forgotten).
func (r *TakeOver) Finish(ctx context.Context, kyma client.Object, runtimeKey string, skr client.Client, t *certificates.TLS) (ctrl.Result, error) {
	if _, clean := r.adopted.Load(runtimeKey); clean {
		return ctrl.Result{}, nil
	}
	refs := bundle.TakeoverRemoval(r.Bundle)
	present := false
	for _, ref := range refs {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(ref.GVK)
		switch err := skr.Get(ctx, ref.Key, obj); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return ctrl.Result{}, err
		default:
			present = true
		}
	}
	if !present {
		r.adopted.Store(runtimeKey, true)
		return ctrl.Result{}, nil
	}
	// A take-over is under way (or was interrupted after the switch):
	// free when the condition is known to be set.
	if err := r.setTakeOverCondition(ctx, kyma, runtimeKey, takenOver); err != nil {
		return ctrl.Result{}, err
	}
	ok, err := r.ready()(ctx, skr, client.ObjectKey{Namespace: refs[0].Key.Namespace, Name: bundle.Name}, t)
	if err != nil {
		return ctrl.Result{}, err
	}
	if !ok {
		vsmetrics.Adoptions.WithLabelValues("waiting-for-webhook").Inc()
		return r.poll(), nil
	}
	if err := deleteRefs(ctx, skr, refs, func(metav1.Object) bool { return true }); err != nil {
		return ctrl.Result{}, err
	}
	r.event(kyma, corev1.EventTypeNormal, ReasonAdoptionDone, "take-over from Lifecycle Manager completed: the take-over Deployment and Secret are removed")
	vsmetrics.Adoptions.WithLabelValues("completed").Inc()
	r.adopted.Store(runtimeKey, true)
	return ctrl.Result{}, nil
}

// trustOurCA adds ca to every Service-based webhook of LM's webhook
// configuration, so that while the Service switches from LM's pods to ours
// both are trusted. A webhook configuration that is not LM's is left alone.
func (r *TakeOver) trustOurCA(ctx context.Context, skr client.Client, ca []byte) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !bundle.IsLifecycleManagers(vwc) {
		return nil
	}
	changed := false
	for i := range vwc.Webhooks {
		cc := &vwc.Webhooks[i].ClientConfig
		if cc.Service == nil || bytes.Contains(cc.CABundle, bytes.TrimSpace(ca)) {
			continue
		}
		cc.CABundle = append(append(bytes.TrimRight(bytes.Clone(cc.CABundle), "\n"), '\n'), ca...)
		changed = true
	}
	if !changed {
		return nil
	}
	if err := skr.Update(ctx, vwc, client.FieldOwner(diffapply.FieldOwner)); err != nil {
		return fmt.Errorf("add our CA to Lifecycle Manager's webhook configuration: %w", err)
	}
	vsmetrics.RuntimeWrites.WithLabelValues("skr-adopt-ca").Inc()
	return nil
}

// replaceLifecycleManagers turns LM's object of desired's kind and name
// into ours with one Update: desired's spec (Service: selector and ports;
// webhook configuration: webhooks), labels and annotations; LM's
// managed-by label and LM's field ownership dropped. An object that is not
// LM's (already ours, or absent) is left to the bundle pass.
func replaceLifecycleManagers(ctx context.Context, skr client.Client, desired *unstructured.Unstructured) error {
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(desired.GroupVersionKind())
	if err := skr.Get(ctx, client.ObjectKeyFromObject(desired), live); err != nil {
		return client.IgnoreNotFound(err)
	}
	if !bundle.IsLifecycleManagers(live) {
		return nil
	}
	var fields [][]string
	switch desired.GetKind() {
	case bundle.ServiceGVK.Kind:
		fields = [][]string{{"spec", "selector"}, {"spec", "ports"}}
	case bundle.ValidatingWebhookConfigurationGVK.Kind:
		fields = [][]string{{"webhooks"}}
	default:
		return fmt.Errorf("cannot take over a %s", desired.GetKind())
	}
	for _, f := range fields {
		v, found, err := unstructured.NestedFieldCopy(desired.Object, f...)
		if err != nil {
			return err
		}
		if !found {
			unstructured.RemoveNestedField(live.Object, f...)
			continue
		}
		if err := unstructured.SetNestedField(live.Object, v, f...); err != nil {
			return err
		}
	}
	labels := live.GetLabels()
	delete(labels, bundle.LMManagedByLabel)
	for k, v := range desired.GetLabels() {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[k] = v
	}
	live.SetLabels(labels)
	annotations := live.GetAnnotations()
	for k, v := range desired.GetAnnotations() {
		if annotations == nil {
			annotations = map[string]string{}
		}
		annotations[k] = v
	}
	live.SetAnnotations(annotations)
	var kept []metav1.ManagedFieldsEntry
	for _, e := range live.GetManagedFields() {
		if e.Manager != LMFieldManager {
			kept = append(kept, e)
		}
	}
	if len(kept) == 0 {
		// An empty list keeps the managed fields; one empty entry clears them.
		kept = []metav1.ManagedFieldsEntry{{}}
	}
	live.SetManagedFields(kept)
	if err := skr.Update(ctx, live, client.FieldOwner(diffapply.FieldOwner)); err != nil {
		return fmt.Errorf("take over %s %s: %w", desired.GetKind(), client.ObjectKeyFromObject(desired), err)
	}
	return ownByApply(ctx, skr, desired)
}

// beforeFirstApply is the field manager the API server records, as an
// Update, for the fields an object had when it is first applied with no
// managed fields (the take-over's update clears LM's).
const beforeFirstApply = "before-first-apply"

// ownByApply hands the fields the take-over's update set over to
// vs-controller's server-side apply: an update records them under an
// Update entry of the field manager, and fields owned there are never
// removed by a later apply that leaves them out (a deleted Watcher's
// webhook would stay). It applies desired (same values: no change of
// content), then drops the Update entries of vs-controller and
// before-first-diffapply.
func ownByApply(ctx context.Context, skr client.Client, desired *unstructured.Unstructured) error {
	key := client.ObjectKeyFromObject(desired)
	if err := skr.Apply(ctx, client.ApplyConfigurationFromUnstructured(desired.DeepCopy()), client.FieldOwner(diffapply.FieldOwner), client.ForceOwnership); err != nil {
		return fmt.Errorf("take over %s %s: apply: %w", desired.GetKind(), key, err)
	}
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(desired.GroupVersionKind())
	if err := skr.Get(ctx, key, live); err != nil {
		return err
	}
	var kept []metav1.ManagedFieldsEntry
	for _, e := range live.GetManagedFields() {
		if e.Operation != metav1.ManagedFieldsOperationUpdate || e.Manager != diffapply.FieldOwner && e.Manager != beforeFirstApply {
			kept = append(kept, e)
		}
	}
	if len(kept) == len(live.GetManagedFields()) {
		return nil
	}
	live.SetManagedFields(kept)
	if err := skr.Update(ctx, live, client.FieldOwner(diffapply.FieldOwner)); err != nil {
		return fmt.Errorf("take over %s %s: field ownership: %w", desired.GetKind(), key, err)
	}
	return nil
}

// deleteIfLifecycleManagers deletes ref if it is (still) LM's.
func deleteIfLifecycleManagers(ctx context.Context, skr client.Client, ref bundle.Ref) (bool, error) {
	n := 0
	err := deleteRefs(ctx, skr, []bundle.Ref{ref}, func(o metav1.Object) bool {
		if bundle.IsLifecycleManagers(o) {
			n++
			return true
		}
		return false
	})
	return n > 0, err
}

// deleteRefs deletes the objects of refs that pass keep's test, each with
// a UID precondition.
func deleteRefs(ctx context.Context, skr client.Client, refs []bundle.Ref, match func(metav1.Object) bool) error {
	for _, ref := range refs {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(ref.GVK)
		if err := skr.Get(ctx, ref.Key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("read %s %s in the runtime: %w", ref.GVK.Kind, ref.Key, err)
		}
		if !match(obj) {
			continue
		}
		uid := obj.GetUID()
		if err := skr.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s %s in the runtime: %w", ref.GVK.Kind, ref.Key, err)
		}
		vsmetrics.RuntimeWrites.WithLabelValues("skr-adopt-delete").Inc()
	}
	return nil
}

// lmCertificates tracks the runtimes still on LM's certificate
// (vsmetrics.RuntimesOnLMCertificate, and vsmetrics.RuntimeOnLMCertificate per
// runtime). Safe for concurrent use.
type lmCertificates struct {
	mu sync.Mutex
	m  map[string]lmCertificate // runtime key -> what is known of it
}

// lmCertificate is a runtime on LM's certificate: its metric labels and
// the issuer of the certificate.
type lmCertificate struct {
	runtimeID, kyma, issuer string
}

func (c *lmCertificates) set(runtimeKey string, v lmCertificate) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]lmCertificate{}
	}
	if old, ok := c.m[runtimeKey]; ok && (old.runtimeID != v.runtimeID || old.kyma != v.kyma) {
		vsmetrics.RuntimeOnLMCertificate.DeleteLabelValues(old.runtimeID, old.kyma)
	}
	c.m[runtimeKey] = v
	vsmetrics.RuntimeOnLMCertificate.WithLabelValues(v.runtimeID, v.kyma).Set(1)
	vsmetrics.RuntimesOnLMCertificate.Set(float64(len(c.m)))
}

func (c *lmCertificates) forget(runtimeKey string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, ok := c.m[runtimeKey]
	if !ok {
		return
	}
	delete(c.m, runtimeKey)
	vsmetrics.RuntimeOnLMCertificate.DeleteLabelValues(old.runtimeID, old.kyma)
	vsmetrics.RuntimesOnLMCertificate.Set(float64(len(c.m)))
}

// lmCertificateIssuer reads LM's Secret skr-webhook-tls in the runtime and
// returns the issuer of its tls.crt ("unparsable" when it is not a PEM
// certificate).
func lmCertificateIssuer(ctx context.Context, skr client.Client, key client.ObjectKey) (string, error) {
	s := &corev1.Secret{}
	if err := skr.Get(ctx, key, s); err != nil {
		return "", err
	}
	b, _ := pem.Decode(s.Data[certificates.KeyCert])
	if b == nil {
		return "unparsable", nil
	}
	c, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		return "unparsable", nil
	}
	return c.Issuer.String(), nil
}
