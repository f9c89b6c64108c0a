package retirement_test

import (
	"context"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/retirement"
)

// TestRenewalAndRevocation walks one runtime through its first certificate,
// two renewals (the second while the first overlap still runs) and a
// revocation, on a fake clock, and checks after each step what the edge
// refuses (contract.Retirement.Retired, as SAN pinning applies it).
func TestRenewalAndRevocation(t *testing.T) {
	ca := pki.MustCA(t, "retirement-ca")
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	leaf := func(nb time.Time) *pki.Leaf {
		l, err := ca.Issue(pki.LeafOptions{CommonName: "rt", NotBefore: nb, NotAfter: nb.Add(48 * time.Hour)})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	scheme := runtime.NewScheme()
	if err := certmanagerv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace("kcp-system")
	kyma.SetName("rt")
	crt := &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: certificates.Name("rt")}}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(kyma, crt).WithStatusSubresource(&certmanagerv1.Certificate{}).Build()
	now := t0
	r := &retirement.Retirer{Client: c, Overlap: 10 * time.Minute, Now: func() time.Time { return now }}
	ctx := context.Background()

	deliver := func(l *pki.Leaf) time.Duration {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(kyma), kyma); err != nil {
			t.Fatal(err)
		}
		wait, err := r.AfterDelivery(ctx, kyma, "rt", l.Cert)
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}
	retired := func(l *pki.Leaf, at time.Time) bool {
		t.Helper()
		if err := c.Get(ctx, client.ObjectKeyFromObject(kyma), kyma); err != nil {
			t.Fatal(err)
		}
		ret, err := contract.ParseRetirement(kyma.GetAnnotations()[contract.AnnotationRetiredCertificates])
		if err != nil {
			t.Fatal(err)
		}
		return ret.Retired(l.Cert.NotBefore, at)
	}
	certificate := func() *certmanagerv1.Certificate {
		t.Helper()
		got := &certmanagerv1.Certificate{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(crt), got); err != nil {
			t.Fatal(err)
		}
		return got
	}

	// A certificate older than the first one the SKR got (e.g. Lifecycle
	// Manager's) is refused after the overlap.
	before, first := leaf(t0.Add(-24*time.Hour)), leaf(t0.Add(-time.Minute))
	if wait := deliver(first); wait != 0 {
		t.Fatalf("first delivery waits %s", wait)
	}
	if retired(before, now.Add(10*time.Minute-time.Second)) || !retired(before, now.Add(10*time.Minute)) || retired(first, now.Add(time.Hour)) {
		t.Fatal("the first delivery does not retire what came before after the overlap, or retires the current certificate")
	}

	// A renewal during the overlap waits for it to end.
	now = t0.Add(2 * time.Minute)
	second := leaf(now)
	if wait := deliver(second); wait != 8*time.Minute {
		t.Fatalf("a renewal during the overlap waits %s, want 8m", wait)
	}
	now = t0.Add(10 * time.Minute)
	if wait := deliver(second); wait != 0 {
		t.Fatalf("after the overlap: waits %s", wait)
	}
	if !retired(before, now) || retired(first, now.Add(10*time.Minute-time.Second)) || !retired(first, now.Add(10*time.Minute)) || retired(second, now.Add(time.Hour)) {
		t.Fatal("the second retirement is wrong")
	}

	// Revocation: nothing changes at the edge until a new certificate is
	// in the SKR; then every older one is refused at once.
	now = t0.Add(30 * time.Minute)
	live := certificate()
	live.Annotations = map[string]string{contract.RevokeCertificateAnnotation: "ticket-42"}
	if err := c.Update(ctx, live); err != nil {
		t.Fatal(err)
	}
	if wait := deliver(second); wait != 0 {
		t.Fatalf("revocation request waits %s", wait)
	}
	got := certificate()
	if got.Annotations[retirement.AnnotationRevoking] != second.Cert.NotBefore.UTC().Format(time.RFC3339) {
		t.Errorf("the certificate being revoked is not marked: %v", got.Annotations)
	}
	if len(got.Status.Conditions) != 1 || got.Status.Conditions[0].Type != certmanagerv1.CertificateConditionIssuing {
		t.Errorf("no new certificate requested: %v", got.Status.Conditions)
	}
	if retired(second, now) {
		t.Fatal("the revoked certificate is refused before its successor reached the SKR")
	}
	deliver(second) // a pass before the new certificate is issued changes nothing
	if retired(second, now) {
		t.Fatal("refused before the new certificate reached the SKR")
	}
	now = now.Add(3 * time.Second)
	third := leaf(now.Add(-time.Second))
	if wait := deliver(third); wait != 0 {
		t.Fatalf("revocation waits %s", wait)
	}
	if !retired(second, now) || !retired(first, now) || retired(third, now) {
		t.Fatal("after the revocation the old certificate is not refused at once, or the new one is")
	}
	got = certificate()
	if _, ok := got.Annotations[contract.RevokeCertificateAnnotation]; ok || got.Annotations[retirement.AnnotationRevoking] != "" {
		t.Errorf("the revocation's annotations stay: %v", got.Annotations)
	}
	// Delivered again: nothing more is written.
	rv := kyma.GetResourceVersion()
	deliver(third)
	if kyma.GetResourceVersion() != rv {
		t.Error("a pass with nothing new wrote the Kyma")
	}
}
