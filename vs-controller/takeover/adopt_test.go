package takeover

// The fake-cluster tier of the take-over (test/fakecluster): a runtime in
// memory holding Lifecycle Manager's SKR bundle as LM applies it
// (fakecluster.LifecycleManagerBundle); vs-controller/integration
// and test/e2e run it against real API servers.

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

var bg = context.Background()

// skrBundle is the runtime reconciler's bundle without Watchers.
type skrBundle struct {
	o         bundle.Options
	forgotten []string
}

func (b *skrBundle) Desired(_ context.Context, tls *certificates.TLS, caBundle []byte) ([]*unstructured.Unstructured, error) {
	var c bundle.WebhookConfigurations
	vwc, err := c.Desired(b.o, nil, caBundle)
	if err != nil {
		return nil, err
	}
	return bundle.Desired(b.o, *tls, nil, vwc)
}

func (b *skrBundle) Apply(ctx context.Context, _ string, skr client.Client, objs []*unstructured.Unstructured) (int, error) {
	n := 0
	for _, o := range objs {
		if _, err := diffapply.Apply(ctx, skr, diffapply.FieldOwner, o); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

func (b *skrBundle) ForgetApplied(runtimeKey string) { b.forgotten = append(b.forgotten, runtimeKey) }

type adoption struct {
	kcp, skr *fakecluster.Cluster
	rec      *events.FakeRecorder
	r        *TakeOver
	sb       *skrBundle
	kyma     *metav1.PartialObjectMetadata
	tls      *certificates.TLS
	ready    map[string]bool // Deployment name -> ready
}

func newAdoption(t *testing.T) *adoption {
	t.Helper()
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	fakecluster.AddKyma(s)
	a := &adoption{rec: events.NewFakeRecorder(100), sb: &skrBundle{}, ready: map[string]bool{}}
	k := fakecluster.Kyma("kcp-system", "kyma-a", "runtime-a", "a.example.com")
	a.kcp = fakecluster.New(t, s, fakecluster.WithObjects(k))
	a.skr = fakecluster.New(t, bundle.Scheme())
	fakecluster.LifecycleManagerBundle(t, a.skr)
	a.kyma = &metav1.PartialObjectMetadata{}
	a.kyma.SetGroupVersionKind(k.GroupVersionKind())
	if err := a.kcp.Get(bg, client.ObjectKeyFromObject(k), a.kyma); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("runtime CA")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a"})
	if err != nil {
		t.Fatal(err)
	}
	a.tls = &certificates.TLS{CA: ca.PEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM}
	a.r = &TakeOver{Client: a.kcp, Recorder: a.rec, SKR: a.sb, Resync: time.Hour, Options: Options{Poll: time.Second,
		Ready: func(_ context.Context, _ client.Client, d client.ObjectKey, _ *certificates.TLS) (bool, error) {
			return a.ready[d.Name], nil
		}}}
	return a
}

func (a *adoption) adopt(t *testing.T) (bool, ctrl.Result) {
	t.Helper()
	proceed, res, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls, a.tls.CA)
	if err != nil {
		t.Fatalf("Adopt: %v", err)
	}
	return proceed, res
}

func (a *adoption) condition(t *testing.T) *metav1.Condition {
	t.Helper()
	return meta.FindStatusCondition(kymaConditions(t, a.kcp, client.ObjectKeyFromObject(a.kyma)), ConditionTakeOver)
}

func (a *adoption) events() []string {
	var out []string
	for {
		select {
		case e := <-a.rec.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func (a *adoption) exists(t *testing.T, obj client.Object, ns, name string) bool {
	t.Helper()
	err := a.skr.Get(bg, client.ObjectKey{Namespace: ns, Name: name}, obj)
	if err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return err == nil
}

func adoptions(result string) float64 {
	return testutil.ToFloat64(vsmetrics.Adoptions.WithLabelValues(result))
}

// TestFakeTakeOver walks a runtime through the take-over: LM active (wait,
// condition WaitingForLifecycleManager), LM stopped (our webhook beside
// LM's, wait for it), switch (our CA trusted by LM's webhooks, Service and
// webhook configuration turned ours, LM's
// other objects deleted), then Finish (the take-over objects go once our
// Deployment is ready) and a clean runtime that costs no reads.
func TestFakeTakeOver(t *testing.T) {
	a := newAdoption(t)
	ns := bundle.DefaultNamespace

	active := adoptions("lm-active")
	proceed, res := a.adopt(t)
	if proceed || res.RequeueAfter != time.Hour {
		t.Errorf("LM active: proceed %t, %+v; want to wait for the resync", proceed, res)
	}
	if c := a.condition(t); c == nil || c.Reason != CondReasonWaitingForLM || c.Status != metav1.ConditionFalse || !strings.Contains(c.Message, "issued by") {
		t.Errorf("LM active: condition %+v", c)
	}
	if evs := a.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Warning "+ReasonLMActive) {
		t.Errorf("LM active: events %q", evs)
	}
	if adoptions("lm-active")-active != 1 || testutil.ToFloat64(vsmetrics.RuntimeOnLMCertificate.WithLabelValues("runtime-a", "kyma-a")) != 1 {
		t.Error("LM active: not counted, or the runtime not reported on LM's certificate")
	}
	if a.exists(t, &appsv1.Deployment{}, ns, bundle.TakeoverName) {
		t.Fatal("LM active: the take-over Deployment was created")
	}

	a.kyma.Labels[SkipReconciliationLabel] = "true"
	waiting := adoptions("waiting-for-webhook")
	proceed, res = a.adopt(t)
	if proceed || res.RequeueAfter != time.Second {
		t.Errorf("LM stopped, webhook not ready: proceed %t, %+v; want the poll", proceed, res)
	}
	if c := a.condition(t); c == nil || c.Reason != CondReasonAdopting {
		t.Errorf("adopting: condition %+v", c)
	}
	if !a.exists(t, &appsv1.Deployment{}, ns, bundle.TakeoverName) || !a.exists(t, &corev1.Secret{}, ns, bundle.TakeoverSecretName) {
		t.Error("our webhook beside LM's: the take-over Deployment or Secret is missing")
	}
	if evs := a.events(); len(evs) != 1 || !strings.HasPrefix(evs[0], "Normal "+ReasonAdoptionWaits) || adoptions("waiting-for-webhook")-waiting != 1 {
		t.Errorf("waiting: events %q", evs)
	}
	if a.exists(t, &corev1.Service{}, ns, bundle.LMMetricsServiceName) == false {
		t.Error("LM's objects went before the switch")
	}

	a.ready[bundle.TakeoverName] = true
	// The switch stopped after its first step (the Service refused): LM's
	// webhooks trust our CA beside LM's, so both webhooks serve.
	a.skr.Fail(fakecluster.Update, "Service", bundle.Name, apierrors.NewInternalError(errors.New("etcd")), 1)
	if _, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls, a.tls.CA); !apierrors.IsInternalError(err) {
		t.Fatalf("Service refused: %v", err)
	}
	lmVWC := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if !a.exists(t, lmVWC, "", bundle.Name) || !bundle.IsLifecycleManagers(lmVWC) || len(lmVWC.Webhooks) == 0 {
		t.Fatal("LM's webhook configuration is gone before the switch")
	}
	for _, w := range lmVWC.Webhooks {
		if !bytes.Contains(w.ClientConfig.CABundle, bytes.TrimSpace(a.tls.CA)) || bytes.Equal(bytes.TrimSpace(w.ClientConfig.CABundle), bytes.TrimSpace(a.tls.CA)) {
			t.Errorf("LM's webhook %s: CA bundle does not hold LM's CA and ours", w.Name)
		}
	}
	switched := adoptions("switched")
	if proceed, _ := a.adopt(t); !proceed {
		t.Fatal("webhook ready: the switch did not proceed")
	}
	if adoptions("switched")-switched != 1 || !slices.Contains(a.sb.forgotten, "kcp-system/kyma-a") {
		t.Error("switch: not counted, or what the runtime holds not forgotten")
	}
	if c := a.condition(t); c == nil || c.Reason != CondReasonTakenOver || c.Status != metav1.ConditionTrue {
		t.Errorf("switched: condition %+v", c)
	}
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
	if !a.exists(t, vwc, "", bundle.Name) || bundle.IsLifecycleManagers(vwc) || vwc.Annotations[diffapply.HashAnnotation] == "" {
		t.Errorf("webhook configuration not ours: labels %v, annotations %v", vwc.Labels, vwc.Annotations)
	}
	// LM's field ownership dropped by the Update: the fake client keeps
	// its own managed fields on Update (test/fakecluster), so
	// vs-controller/integration checks that.
	svc := &corev1.Service{}
	ours, err := bundle.Service(bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !a.exists(t, svc, ns, bundle.Name) || bundle.IsLifecycleManagers(svc) || !maps.Equal(svc.Spec.Selector, ours.Spec.Selector) {
		t.Errorf("Service not switched to our pods: %v, want %v", svc.Spec.Selector, ours.Spec.Selector)
	}
	for _, gone := range []struct {
		obj  client.Object
		ns   string
		name string
	}{{&corev1.Service{}, ns, bundle.LMMetricsServiceName}, {&appsv1.Deployment{}, ns, bundle.Name}, {&corev1.Secret{}, ns, bundle.SecretName}} {
		if a.exists(t, gone.obj, gone.ns, gone.name) {
			t.Errorf("LM's %T %s stayed", gone.obj, gone.name)
		}
	}
	if testutil.CollectAndCount(vsmetrics.RuntimeOnLMCertificate) != 0 {
		t.Error("the runtime is still reported on LM's certificate")
	}
	if evs := a.events(); !slices.ContainsFunc(evs, func(e string) bool { return strings.HasPrefix(e, "Normal "+ReasonAdopted) }) {
		t.Errorf("switched: events %q", evs)
	}

	// Finish: waits for our skr-webhook Deployment, then removes the
	// take-over objects and remembers the runtime as clean.
	res, err = a.r.Finish(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls)
	if err != nil || res.RequeueAfter != time.Second {
		t.Errorf("Finish before our Deployment is ready: %+v, %v; want the poll", res, err)
	}
	a.ready[bundle.Name] = true
	completed := adoptions("completed")
	if res, err := a.r.Finish(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls); err != nil || res != (ctrl.Result{}) {
		t.Errorf("Finish: %+v, %v", res, err)
	}
	if a.exists(t, &appsv1.Deployment{}, ns, bundle.TakeoverName) || a.exists(t, &corev1.Secret{}, ns, bundle.TakeoverSecretName) || adoptions("completed")-completed != 1 {
		t.Error("Finish: the take-over objects stayed, or not counted")
	}
	a.skr.Fail(fakecluster.Get, "Deployment", "", fakecluster.ErrUnreachable, -1)
	if proceed, _ := a.adopt(t); !proceed {
		t.Error("a clean runtime: no proceed")
	}
	if _, err := a.r.Finish(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls); err != nil {
		t.Errorf("a clean runtime: Finish read the runtime (%v)", err)
	}
	a.r.Forget("kcp-system/kyma-a")
	if _, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls, a.tls.CA); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("forgotten: Adopt did not look again (%v)", err)
	}
}

// TestFakeTakeOverFailures: a step that fails is Adopt's error and counted;
// a runtime without LM's objects proceeds at once.
func TestFakeTakeOverFailures(t *testing.T) {
	a := newAdoption(t)
	a.kyma.Labels[SkipReconciliationLabel] = "true"
	a.ready[bundle.TakeoverName] = true
	for _, f := range []struct {
		verb, kind, name string
	}{
		{fakecluster.StatusPatch, "Kyma", ""}, // the condition Adopting
		{fakecluster.Apply, "Deployment", bundle.TakeoverName},
		{fakecluster.Update, "ValidatingWebhookConfiguration", bundle.Name},
		{fakecluster.Update, "Service", bundle.Name},
		{fakecluster.Delete, "PriorityClass", ""},
	} {
		failed := adoptions("failed")
		a.skr.Fail(f.verb, f.kind, f.name, apierrors.NewInternalError(errors.New("etcd")), 1)
		a.kcp.Fail(f.verb, f.kind, f.name, apierrors.NewInternalError(errors.New("etcd")), 1)
		if proceed, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-a", a.skr, a.tls, a.tls.CA); proceed || !apierrors.IsInternalError(err) {
			t.Errorf("%s %s failed: proceed %t, %v", f.verb, f.kind, proceed, err)
		}
		if adoptions("failed")-failed != 1 {
			t.Errorf("%s %s failed: not counted", f.verb, f.kind)
		}
		a.r.conditions.Clear() // the condition write is retried each time
	}
	if proceed, _ := a.adopt(t); !proceed {
		t.Error("after the failures: no proceed")
	}

	clean := fakecluster.New(t, bundle.Scheme())
	clean.Fail(fakecluster.Get, "ValidatingWebhookConfiguration", "", fakecluster.ErrUnreachable, 1)
	if proceed, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-b", clean, a.tls, a.tls.CA); proceed || !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("unreachable: proceed %t, %v", proceed, err)
	}
	if proceed, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-b", clean, a.tls, a.tls.CA); !proceed || err != nil {
		t.Errorf("no LM objects: proceed %t, %v", proceed, err)
	}
	// After a bundle pass without take-over objects the runtime is clean:
	// no more reads for LM's objects.
	if _, err := a.r.Finish(bg, a.kyma, "kcp-system/kyma-b", clean, a.tls); err != nil {
		t.Fatal(err)
	}
	clean.Fail(fakecluster.Get, "ValidatingWebhookConfiguration", "", fakecluster.ErrUnreachable, -1)
	if proceed, _, err := a.r.Adopt(bg, a.kyma, "kcp-system/kyma-b", clean, a.tls, a.tls.CA); !proceed || err != nil {
		t.Errorf("clean runtime: proceed %t, %v; want no reads", proceed, err)
	}
}
