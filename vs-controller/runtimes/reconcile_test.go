package runtimes

// The fake-cluster tier of the runtime reconciler (test/fakecluster): the
// KCP and a runtime in memory; vs-controller/integration runs it against
// real API servers.

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

const kymaNS = "kcp-system"

var (
	ctx   = context.Background()
	kymaA = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: kymaNS, Name: "kyma-a"}}
)

func kcpScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	utilruntime.Must(istionetworkingv1.AddToScheme(s))
	utilruntime.Must(certmanagerv1.AddToScheme(s))
	fakecluster.AddKyma(s)
	return s
}

type setup struct {
	kcp, skr *fakecluster.Cluster
	runtimes *fakecluster.Runtimes
	rec      *events.FakeRecorder
	r        *Reconciler
	issued   *corev1.Secret
}

// newSetup: Kyma kyma-a (runtime runtime-a, skr-domain a.example.com), its
// labelled kubeconfig Secret and kcpObjs in the KCP; an empty runtime; the
// reconciler as controllers.New builds it, with the take-over.
func newSetup(t *testing.T, kcpObjs ...client.Object) *setup {
	t.Helper()
	s := &setup{runtimes: &fakecluster.Runtimes{}, rec: events.NewFakeRecorder(100)}
	s.kcp = fakecluster.New(t, kcpScheme(), fakecluster.WithIndexer(identity.IndexRuntimeID),
		fakecluster.WithObjects(append([]client.Object{fakecluster.Kyma(kymaNS, "kyma-a", "runtime-a", "a.example.com"),
			fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)}, kcpObjs...)...))
	s.skr = fakecluster.New(t, bundle.Scheme())
	s.runtimes.Add(kymaA.String(), s.skr)
	s.r = &Reconciler{
		Client: s.kcp, Recorder: s.rec, Clients: s.runtimes, KymaNamespace: kymaNS,
		Issuer: cmmeta.IssuerReference{Name: "runtime-ca", Kind: "Issuer"}, KubeconfigRetry: time.Minute, Resync: 10 * time.Minute,
		WatcherDebounce: -1,
	}
	s.r.TakeOver = &takeover.TakeOver{Client: s.kcp, Bundle: s.r.Bundle, SKR: skrBundle{s.r}}
	ca, err := pki.NewCA("runtime CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", NotAfter: time.Now().Add(90 * 24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	s.issued = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: certificates.Name("runtime-a"),
		Labels: map[string]string{contract.LabelPartOf: contract.PartOf}},
		Data: map[string][]byte{certificates.KeyCA: ca.PEM, certificates.KeyCert: leaf.CertPEM, certificates.KeyKey: leaf.KeyPEM}}
	return s
}

func (s *setup) reconcile(t *testing.T) ctrl.Result {
	t.Helper()
	res, err := s.r.Reconcile(ctx, kymaA)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (s *setup) events() []string {
	var out []string
	for {
		select {
		case e := <-s.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (s *setup) kyma(t *testing.T) *metav1.PartialObjectMetadata {
	t.Helper()
	k := NewKyma()
	if err := s.kcp.Get(ctx, kymaA.NamespacedName, k); err != nil {
		t.Fatal(err)
	}
	return k
}

func outcomes(result string) float64 {
	return testutil.ToFloat64(vsmetrics.RuntimeReconciles.WithLabelValues(result))
}

func hasEvent(evs []string, prefix string) bool {
	return slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// routedWatcher is a Watcher that holds its route (its VirtualService).
func routedWatcher(name, manager string) (*v1beta2.Watcher, *istionetworkingv1.VirtualService) {
	w := &v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: name, UID: types.UID("uid-" + name), Generation: 1},
		Spec: v1beta2.WatcherSpec{Manager: manager, ServiceInfo: v1beta2.Service{Name: "l", Namespace: kymaNS, Port: 80},
			ResourceToWatch: v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "v1beta2", Resource: "kymas"}, Field: v1beta2.SpecField}}
	vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: name,
		OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(w, v1beta2.GroupVersion.WithKind("Watcher"))}}}
	return w, vs
}

// TestFakeRuntimeBundle: a Kyma with skr-domain and a kubeconfig gets the
// finalizer and its Certificate; once the Certificate's Secret exists the
// bundle is applied into the runtime (with the webhooks of the Watchers
// that hold a route) and the pass comes back after the resync; the next
// pass writes nothing anywhere; an object removed in the runtime is
// applied again.
func TestFakeRuntimeBundle(t *testing.T) {
	w, vs := routedWatcher("w", "lifecycle-manager")
	s := newSetup(t, w, vs)
	s.r.CertificateDuration, s.r.CertificateRenewBefore, s.r.ExtraDNSNames = 48*time.Hour, 24*time.Hour, []string{"localhost"}
	endSKR := s.skr.ExpectNoWrites(t) // nothing in the runtime before the certificate is issued
	if res := s.reconcile(t); res != (ctrl.Result{}) {
		t.Errorf("before the Certificate's Secret: %+v, want no requeue (its creation triggers the next pass)", res)
	}
	endSKR()
	if !controllerutil.ContainsFinalizer(s.kyma(t), Finalizer) {
		t.Error("no finalizer on the Kyma")
	}
	crt := &certmanagerv1.Certificate{}
	if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name("runtime-a")}, crt); err != nil {
		t.Fatal(err)
	}
	if crt.Spec.CommonName != "runtime-a" || crt.Spec.DNSNames[0] != "a.example.com" || !slices.Contains(crt.Spec.DNSNames, "skr-webhook.kyma-system.svc") ||
		crt.Spec.IssuerRef.Name != "runtime-ca" || metav1.GetControllerOf(crt).UID != "uid-kyma-a" {
		t.Errorf("Certificate %+v", crt.Spec)
	}
	if crt.Spec.Duration == nil || crt.Spec.Duration.Duration != 48*time.Hour || crt.Spec.RenewBefore == nil || crt.Spec.RenewBefore.Duration != 24*time.Hour ||
		!slices.Contains(crt.Spec.DNSNames, "localhost") {
		t.Errorf("Certificate lifetime %v/%v, names %v; want 48h, renewed 24h before, with localhost", crt.Spec.Duration, crt.Spec.RenewBefore, crt.Spec.DNSNames)
	}

	if err := s.kcp.Create(ctx, s.issued); err != nil {
		t.Fatal(err)
	}
	applied := outcomes("applied")
	if res := s.reconcile(t); res.RequeueAfter != 10*time.Minute {
		t.Errorf("after the bundle: %+v, want the resync", res)
	}
	if outcomes("applied")-applied != 1 || !hasEvent(s.events(), "Normal "+ReasonBundleApplied) {
		t.Error("bundle applied: not counted or no Event")
	}
	sec := &corev1.Secret{}
	if err := s.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, sec); err != nil {
		t.Fatal(err)
	}
	if string(sec.Data[certificates.KeyCert]) != string(s.issued.Data[certificates.KeyCert]) || string(sec.Data[certificates.KeyCA]) != string(s.issued.Data[certificates.KeyCA]) {
		t.Error("the runtime's Secret does not hold the issued certificate")
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if err := s.skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
		t.Fatal(err)
	}
	if len(vwc.Webhooks) != 1 || vwc.Webhooks[0].Name != w.WebhookName() || string(vwc.Webhooks[0].ClientConfig.CABundle) != string(s.issued.Data[certificates.KeyCA]) {
		t.Errorf("webhooks %+v", vwc.Webhooks)
	}
	for _, o := range []client.Object{&appsv1.Deployment{}, &corev1.Service{}} {
		if err := s.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name}, o); err != nil {
			t.Errorf("%T in the runtime: %v", o, err)
		}
	}

	s.skr.Reset() // its reads
	unchanged := outcomes("unchanged")
	endKCP, endSKR := s.kcp.ExpectNoWrites(t), s.skr.ExpectNoWrites(t)
	s.reconcile(t)
	endKCP()
	endSKR()
	// Each object known up to date at its resourceVersion costs one
	// metadata read, not a second, full one.
	if n := s.skr.Reads("Deployment"); n != 1 {
		t.Errorf("%d reads of the Deployment in a pass with nothing new, want 1", n)
	}
	if outcomes("unchanged")-unchanged != 1 {
		t.Error("not counted as unchanged")
	}

	if err := s.skr.Delete(ctx, &appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: bundle.DefaultNamespace, Name: bundle.Name}}); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	if got := s.skr.Writes(); len(got) != 2 || got[1].Kind != "Deployment" || got[1].Verb != fakecluster.Apply {
		t.Errorf("after the Deployment went: writes %v, want it applied again", got)
	}
}

// TestFakeRuntimeFailures: an unreachable runtime and one that refuses a
// write are returned for a retry with an Event each; a kubeconfig that is
// refused, a runtime ID that cannot name a certificate and a missing
// kubeconfig are not retried (but a missing kubeconfig is looked at again
// later); a Certificate the KCP refuses is an Event and a retry.
func TestFakeRuntimeFailures(t *testing.T) {
	s := newSetup(t)
	if err := s.kcp.Create(ctx, s.issued); err != nil {
		t.Fatal(err)
	}
	unreachable := outcomes("unreachable")
	s.skr.Fail(fakecluster.Get, "Namespace", "", fakecluster.ErrUnreachable, 1)
	if _, err := s.r.Reconcile(ctx, kymaA); err == nil || !hasEvent(s.events(), "Warning "+ReasonUnreachable) || outcomes("unreachable")-unreachable != 1 {
		t.Errorf("unreachable: %v", err)
	}
	failed := outcomes("failed")
	s.skr.Fail(fakecluster.Apply, "Deployment", "", apierrors.NewForbidden(schema.GroupResource{Resource: "deployments"}, bundle.Name, errors.New("admission says no")), 1)
	if _, err := s.r.Reconcile(ctx, kymaA); !apierrors.IsForbidden(err) || !hasEvent(s.events(), "Warning "+ReasonBundleFailed) || outcomes("failed")-failed != 1 {
		t.Errorf("refused: %v", err)
	}
	s.reconcile(t)

	s.runtimes.Refuse(kymaA.String(), errors.New("kubeconfig user uses an exec plugin"))
	invalid := outcomes("invalid-kubeconfig")
	if res := s.reconcile(t); res != (ctrl.Result{}) || !hasEvent(s.events(), "Warning "+ReasonInvalidKubeconfig) || outcomes("invalid-kubeconfig")-invalid != 1 {
		t.Errorf("refused kubeconfig: %+v", res)
	}
	s.runtimes.Refuse(kymaA.String(), nil)

	s.kcp.Fail(fakecluster.Apply, "Certificate", "", apierrors.NewInternalError(errors.New("etcd")), 1)
	if err := s.kcp.Delete(ctx, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: certificates.Name("runtime-a")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.r.Reconcile(ctx, kymaA); !apierrors.IsInternalError(err) || !hasEvent(s.events(), "Warning "+ReasonCertificate) {
		t.Errorf("Certificate refused: %v", err)
	}

	if err := s.kcp.Delete(ctx, fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)); err != nil {
		t.Fatal(err)
	}
	if res := s.reconcile(t); res.RequeueAfter != time.Minute {
		t.Errorf("no kubeconfig: %+v, want the kubeconfig retry", res)
	}

	bad := newSetup(t)
	k := bad.kyma(t)
	k.Labels[contract.LabelRuntimeID] = strings.Repeat("x", 70)
	if err := bad.kcp.Update(ctx, k); err != nil {
		t.Fatal(err)
	}
	if res := bad.reconcile(t); res != (ctrl.Result{}) || !hasEvent(bad.events(), "Warning "+ReasonInvalidRuntime) {
		t.Errorf("invalid runtime ID: %+v", res)
	}
}

// TestFakeUnlabelledKubeconfig: a kubeconfig Secret the cache does not hold
// is read from the API server, counted each time.
func TestFakeUnlabelledKubeconfig(t *testing.T) {
	s := newSetup(t)
	if err := s.kcp.Delete(ctx, fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)); err != nil {
		t.Fatal(err)
	}
	api := fakecluster.New(t, kcpScheme(), fakecluster.WithObjects(fakecluster.KubeconfigSecret(kymaNS, "runtime-a", false)))
	s.r.APIReader = api
	reads := testutil.ToFloat64(vsmetrics.KubeconfigUncachedReads)
	for range 2 {
		s.reconcile(t)
	}
	if got := testutil.ToFloat64(vsmetrics.KubeconfigUncachedReads) - reads; got != 2 {
		t.Errorf("%v uncached reads, want 2", got)
	}
	if !controllerutil.ContainsFinalizer(s.kyma(t), Finalizer) {
		t.Error("the runtime was not taken on")
	}
}

// TestFakeRuntimeRemoval: a Kyma that loses its skr-domain (or is deleted)
// has the bundle removed from its runtime — only objects vs-controller
// applied — and its Certificate and Secret deleted, then the finalizer;
// what is cached of the runtime is forgotten. Without a kubeconfig the
// bundle is left in place, said in an Event.
func TestFakeRuntimeRemoval(t *testing.T) {
	s := newSetup(t)
	if err := s.kcp.Create(ctx, s.issued); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	s.reconcile(t)
	foreign := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: bundle.DefaultNamespace, Name: "someone-elses"}}
	if err := s.skr.Create(ctx, foreign); err != nil {
		t.Fatal(err)
	}
	// A bundle object someone else made: no hash annotation, left alone.
	pdbKey := client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name}
	svc := &corev1.Service{}
	if err := s.skr.Get(ctx, pdbKey, svc); err != nil {
		t.Fatal(err)
	}
	delete(svc.Annotations, diffapply.HashAnnotation)
	if err := s.skr.Update(ctx, svc); err != nil {
		t.Fatal(err)
	}

	k := s.kyma(t)
	delete(k.Annotations, contract.AnnotationSKRDomain)
	if err := s.kcp.Update(ctx, k); err != nil {
		t.Fatal(err)
	}
	removed := outcomes("removed")
	s.reconcile(t)
	if !hasEvent(s.events(), "Normal "+ReasonBundleRemoved) || outcomes("removed")-removed != 1 {
		t.Error("no removal Event or count")
	}
	if err := s.skr.Get(ctx, pdbKey, &appsv1.Deployment{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Deployment: %v, want removed", err)
	}
	if err := s.skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, &admissionregistrationv1.ValidatingWebhookConfiguration{}); !apierrors.IsNotFound(err) {
		t.Errorf("the webhook configuration: %v, want removed", err)
	}
	if err := s.skr.Get(ctx, pdbKey, &corev1.Service{}); err != nil {
		t.Errorf("the Service without our annotation: %v, want kept", err)
	}
	if err := s.skr.Get(ctx, client.ObjectKeyFromObject(foreign), &corev1.ConfigMap{}); err != nil {
		t.Errorf("someone else's ConfigMap: %v", err)
	}
	for _, o := range []client.Object{&certmanagerv1.Certificate{}, &corev1.Secret{}} {
		if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name("runtime-a")}, o); !apierrors.IsNotFound(err) {
			t.Errorf("%T in the KCP: %v, want deleted", o, err)
		}
	}
	if controllerutil.ContainsFinalizer(s.kyma(t), Finalizer) {
		t.Error("finalizer kept")
	}
	if got := s.runtimes.Forgotten(); len(got) != 1 || got[0] != kymaA.String() {
		t.Errorf("forgotten %q", got)
	}

	// Deleted without a kubeconfig: the bundle is left, the Kyma goes.
	s2 := newSetup(t)
	s2.reconcile(t)
	if err := s2.kcp.Delete(ctx, fakecluster.KubeconfigSecret(kymaNS, "runtime-a", true)); err != nil {
		t.Fatal(err)
	}
	if err := s2.kcp.Delete(ctx, s2.kyma(t)); err != nil {
		t.Fatal(err)
	}
	s2.reconcile(t)
	if !hasEvent(s2.events(), "Warning "+ReasonBundleLeft) {
		t.Error("no BundleLeft Event")
	}
	if err := s2.kcp.Get(ctx, kymaA.NamespacedName, NewKyma()); !apierrors.IsNotFound(err) {
		t.Errorf("the Kyma after its finalizer: %v", err)
	}
	s2.reconcile(t) // gone: forgotten, nothing to do

	// A removal that fails keeps the finalizer.
	s3 := newSetup(t)
	if err := s3.kcp.Create(ctx, s3.issued); err != nil {
		t.Fatal(err)
	}
	s3.reconcile(t)
	if err := s3.kcp.Delete(ctx, s3.kyma(t)); err != nil {
		t.Fatal(err)
	}
	s3.skr.Fail(fakecluster.Delete, "Deployment", "", fakecluster.ErrUnreachable, 1)
	if _, err := s3.r.Reconcile(ctx, kymaA); err == nil || !hasEvent(s3.events(), "Warning "+ReasonCleanupFailed) {
		t.Errorf("removal failed: %v", err)
	}
	if !controllerutil.ContainsFinalizer(s3.kyma(t), Finalizer) {
		t.Error("finalizer removed although the bundle stayed")
	}
}

// TestFakeRuntimeTakeOver: a runtime that holds Lifecycle Manager's SKR
// bundle, with LM stopped for it, is taken over in one pass of the
// reconciler (its bundle through the take-over, our webhook ready at once
// here): LM's objects and the take-over objects gone, our bundle in
// place, the Kyma's condition TakenOver; LM still active, nothing in the
// runtime changes.
func TestFakeRuntimeTakeOver(t *testing.T) {
	s := newSetup(t)
	fakecluster.LifecycleManagerBundle(t, s.skr)
	s.r.TakeOver = &takeover.TakeOver{Client: s.kcp, Bundle: s.r.Bundle, SKR: skrBundle{s.r}, Resync: s.r.Resync, Options: takeover.Options{
		Ready: func(context.Context, client.Client, client.ObjectKey, *certificates.TLS) (bool, error) {
			return true, nil
		}}}
	if err := s.kcp.Create(ctx, s.issued); err != nil {
		t.Fatal(err)
	}
	end := s.skr.ExpectNoWrites(t) // LM active: nothing in the runtime changes, in any pass
	s.reconcile(t)                 // the finalizer
	if res := s.reconcile(t); res.RequeueAfter != 10*time.Minute {
		t.Errorf("LM active: %+v, want the resync", res)
	}
	end()

	k := fakecluster.Kyma(kymaNS, "kyma-a", "", "")
	if err := s.kcp.Get(ctx, kymaA.NamespacedName, k); err != nil {
		t.Fatal(err)
	}
	k.SetLabels(map[string]string{contract.LabelRuntimeID: "runtime-a", takeover.SkipReconciliationLabel: "true"})
	if err := s.kcp.Update(ctx, k); err != nil {
		t.Fatal(err)
	}
	s.reconcile(t)
	if lm, err := bundle.FindLifecycleManager(ctx, s.skr, s.r.Bundle); err != nil || len(lm) != 0 {
		t.Errorf("LM's objects left: %v, %v", lm, err)
	}
	for _, ref := range bundle.TakeoverRemoval(s.r.Bundle) {
		if err := s.skr.Get(ctx, ref.Key, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: ref.GVK.GroupVersion().String(), Kind: ref.GVK.Kind}}); !apierrors.IsNotFound(err) {
			t.Errorf("take-over object %s %s: %v, want removed", ref.GVK.Kind, ref.Key, err)
		}
	}
	d := &appsv1.Deployment{}
	if err := s.skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.Name}, d); err != nil || d.Annotations[diffapply.HashAnnotation] == "" {
		t.Errorf("our skr-webhook Deployment: %v, %v", err, d.Annotations)
	}
	if err := s.kcp.Get(ctx, kymaA.NamespacedName, k); err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
	if len(conds) != 1 || conds[0].(map[string]any)["reason"] != takeover.CondReasonTakenOver {
		t.Errorf("the Kyma's conditions %v, want %s", conds, takeover.CondReasonTakenOver)
	}
}

// TestFakeRuntimeWatches: Certificates and Secrets map to their Kyma;
// every Watcher event enqueues every Kyma; the predicates pass what a
// runtime's bundle depends on.
func TestFakeRuntimeWatches(t *testing.T) {
	s := newSetup(t, fakecluster.Kyma(kymaNS, "kyma-b", "", "b.example.com"))
	crt := &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: "x",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "operator.kyma-project.io/v1beta2", Kind: "Kyma", Name: "kyma-a", Controller: ptrTo(true)}}}}
	if got := kymaOwner(ctx, crt); len(got) != 1 || got[0].NamespacedName != kymaA.NamespacedName {
		t.Errorf("Certificate: %v", got)
	}
	crt.OwnerReferences[0].Kind = "Other"
	if got := kymaOwner(ctx, crt); len(got) != 0 {
		t.Errorf("Certificate of another owner: %v", got)
	}
	for _, tc := range []struct {
		secret, want string
	}{
		{"kubeconfig-runtime-a", "kyma-a"}, {certificates.Name("runtime-a"), "kyma-a"}, {"kubeconfig-kyma-b", "kyma-b"},
		{"kubeconfig-nobody", ""}, {"unrelated", ""},
	} {
		got := s.r.kymasForSecret(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: tc.secret}})
		if (tc.want == "") != (len(got) == 0) || (len(got) == 1 && got[0].Name != tc.want) {
			t.Errorf("Secret %s: %v, want %q", tc.secret, got, tc.want)
		}
	}

	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	h := &allKymas{r: s.r}
	h.Delete(ctx, event.DeleteEvent{}, q)
	h.Generic(ctx, event.GenericEvent{}, q)
	if q.Len() != 2 {
		t.Errorf("%d queued, want both Kymas (once each)", q.Len())
	}

	old := fakecluster.Kyma(kymaNS, "k", "rt", "d")
	for _, tc := range []struct {
		name string
		edit func(u *unstructured.Unstructured)
		want bool
	}{
		{"nothing", func(*unstructured.Unstructured) {}, false},
		{"another label", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{contract.LabelRuntimeID: "rt", "x": "y"})
		}, false},
		{"skr-domain", func(u *unstructured.Unstructured) {
			u.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "e"})
		}, true},
		{"runtime ID", func(u *unstructured.Unstructured) { u.SetLabels(map[string]string{contract.LabelRuntimeID: "rt2"}) }, true},
		{"skip reconciliation", func(u *unstructured.Unstructured) {
			u.SetLabels(map[string]string{contract.LabelRuntimeID: "rt", takeover.SkipReconciliationLabel: "true"})
		}, true},
		{"finalizer", func(u *unstructured.Unstructured) { u.SetFinalizers([]string{Finalizer}) }, true},
		{"deletion", func(u *unstructured.Unstructured) { now := metav1.Now(); u.SetDeletionTimestamp(&now) }, true},
	} {
		n := old.DeepCopy()
		tc.edit(n)
		if got := kymaChanged(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
			t.Errorf("Kyma %s: %t, want %t", tc.name, got, tc.want)
		}
	}
	w, vs := routedWatcher("w", "m")
	w2 := w.DeepCopy()
	if watcherChanged(event.UpdateEvent{ObjectOld: w, ObjectNew: w2}) {
		t.Error("an unchanged Watcher passed")
	}
	w2.Generation = 2
	if !watcherChanged(event.UpdateEvent{ObjectOld: w, ObjectNew: w2}) {
		t.Error("a spec change did not pass")
	}
	vs2 := vs.DeepCopy()
	p := routeHolderChanged{}
	if p.Update(event.UpdateEvent{ObjectOld: vs, ObjectNew: vs2}) || !p.Create(event.CreateEvent{}) || !p.Delete(event.DeleteEvent{}) || p.Generic(event.GenericEvent{}) {
		t.Error("routeHolderChanged: creations and deletions pass, an unchanged controller does not")
	}
	vs2.OwnerReferences = nil
	if !p.Update(event.UpdateEvent{ObjectOld: vs, ObjectNew: vs2}) {
		t.Error("routeHolderChanged: a lost controller did not pass")
	}
}

func ptrTo[T any](v T) *T { return &v }

// TestCertificateChanged: recording the trust evidence on a Certificate
// (a pass's own write) triggers no pass; any other change does.
func TestCertificateChanged(t *testing.T) {
	old := &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: "c", Generation: 1,
		Annotations: map[string]string{diffapply.HashAnnotation: "h"}}}
	for _, tc := range []struct {
		name string
		edit func(c *certmanagerv1.Certificate)
		want bool
	}{
		{"nothing", func(*certmanagerv1.Certificate) {}, true},
		{"evidence only", func(c *certmanagerv1.Certificate) { c.Annotations[trust.AnnotationEvidence] = `{"ca":"x"}` }, false},
		{"evidence and spec", func(c *certmanagerv1.Certificate) {
			c.Annotations[trust.AnnotationEvidence] = `{"ca":"x"}`
			c.Generation = 2
		}, true},
		{"evidence and status", func(c *certmanagerv1.Certificate) {
			c.Annotations[trust.AnnotationEvidence] = `{"ca":"x"}`
			c.Status.Conditions = []certmanagerv1.CertificateCondition{{Type: certmanagerv1.CertificateConditionReady, Status: cmmeta.ConditionTrue}}
		}, true},
		{"evidence and another annotation", func(c *certmanagerv1.Certificate) {
			c.Annotations[trust.AnnotationEvidence] = `{"ca":"x"}`
			c.Annotations[diffapply.HashAnnotation] = "h2"
		}, true},
	} {
		n := old.DeepCopy()
		tc.edit(n)
		if got := certificateChanged(event.UpdateEvent{ObjectOld: old, ObjectNew: n}); got != tc.want {
			t.Errorf("Certificate %s: %t, want %t", tc.name, got, tc.want)
		}
	}
}
