package trust

import (
	"context"
	"crypto/x509"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// TestEvidenceDecidesOnAnotherReplica (issue 36): what a runtime's SKR
// was given is recorded on its Certificate by the replica that pushed it —
// once per change, not per pass — and another replica (the elected one,
// a new process: nothing in its memory) decides from it which runtime CAs
// are still in use. Without the record the other replica knows nothing of
// the runtime and keeps every CA (the unknown-state hold).
func TestEvidenceDecidesOnAnotherReplica(t *testing.T) {
	ctx := context.Background()
	c := keeperClient(t)
	const id = "runtime-ev"
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(keeperNS)
	kyma.SetName(id)
	kyma.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "ev.example.com"})
	if err := c.Create(ctx, kyma); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: keeperNS, Name: certificates.Name(id)}}); err != nil {
		t.Fatal(err)
	}
	oldCA, newCA := pki.MustCA(t, "old-ca"), pki.MustCA(t, "new-ca")
	cas := []*x509.Certificate{oldCA.Cert, newCA.Cert}
	now := time.Now()
	clock := func() time.Time { return now }
	const settle = time.Minute
	owner := &Keeper{Cache: c, KymaNamespace: keeperNS, Settle: settle, Now: clock}
	leader := &Keeper{Cache: c, KymaNamespace: keeperNS, Settle: settle, Now: clock, UnknownHold: time.Hour}
	writes := func() float64 {
		return testutil.ToFloat64(vsmetrics.RuntimeWrites.WithLabelValues("certificate-trust-evidence"))
	}
	ky := identity.NewKyma()
	ky.SetNamespace(keeperNS)
	ky.SetName(id)
	push := func(leafCA *pki.CA) {
		t.Helper()
		leaf := mustLeaf(t, leafCA, id, time.Now().Add(time.Hour))
		// current nil: no renewal is asked for; only the evidence matters.
		tr := RuntimeTrust{leaf: leaf.Cert, leafCA: Fingerprint(leafCA.Cert), gatewayFP: "," + Fingerprint(newCA.Cert) + ","}
		if _, err := owner.AfterPush(ctx, ky, keeperNS+"/"+id, id, tr); err != nil {
			t.Fatal(err)
		}
	}
	inUse := func() []bool {
		t.Helper()
		used, err := leader.runtimeCAsInUse(ctx, cas)
		if err != nil {
			t.Fatal(err)
		}
		return used
	}
	if got := inUse(); !got[0] || !got[1] {
		t.Fatalf("before any push: %v, want every CA held (the state is unknown)", got)
	}

	before := writes()
	push(oldCA)
	push(oldCA)
	if n := writes() - before; n != 1 {
		t.Errorf("two pushes of the same trust wrote the evidence %v times, want once", n)
	}
	if got := inUse(); !got[0] || got[1] {
		t.Errorf("the SKR holds a certificate of the old CA: in use %v, want [true false] (decided from the stored evidence)", got)
	}

	// Re-issued by the new CA: the old one stays in use for Settle (the
	// webhook may still serve the certificate before), then leaves.
	push(newCA)
	crt := &certmanagerv1.Certificate{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: keeperNS, Name: certificates.Name(id)}, crt); err != nil {
		t.Fatal(err)
	}
	ev, ok := EvidenceOf(crt)
	if !ok || ev.CA != Fingerprint(newCA.Cert) || ev.PrevCA != Fingerprint(oldCA.Cert) || ev.ChangedAt == nil {
		t.Fatalf("evidence after the re-issue: %+v (%v)", ev, ok)
	}
	if got := inUse(); !got[0] || !got[1] {
		t.Errorf("within Settle of the change: %v, want both CAs in use", got)
	}
	now = now.Add(settle + time.Second)
	if got := inUse(); got[0] || !got[1] {
		t.Errorf("past Settle: %v, want [false true]", got)
	}
	if n := writes() - before; n != 2 {
		t.Errorf("evidence written %v times for two changes, want 2", n)
	}
}
