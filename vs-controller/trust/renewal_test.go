package trust

import (
	"context"
	"fmt"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"golang.org/x/time/rate"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
)

// TestRenewalSlots: after a CA rotation every runtime waiting for a renewal
// takes one slot of the rate limit and comes back when it is due, so N
// runtimes are renewed in N/rate seconds with one extra pass each. (Before,
// a runtime cancelled its reservation and retried a full pass after 1/rate:
// every waiting runtime raced for one token every 200 ms, 3 renewals/s of 5
// with 100 runtimes in vs-controller/bench BenchmarkCARotation.)
func TestRenewalSlots(t *testing.T) {
	oldCA, err := pki.NewCA("old-ca")
	if err != nil {
		t.Fatal(err)
	}
	newCA, err := pki.NewCA("new-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := oldCA.Issue(pki.LeafOptions{CommonName: "runtime"})
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := certmanagerv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	const n = 10
	var objs []client.Object
	for i := range n {
		objs = append(objs, &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: certificates.Name(fmt.Sprintf("runtime-%d", i))}})
	}
	c := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(&certmanagerv1.Certificate{}).Build()
	k := &Keeper{Cache: c, Renewals: rate.NewLimiter(5, 1)}
	kyma := identity.NewKyma()
	kyma.SetNamespace("kcp-system")
	tr := RuntimeTrust{leaf: leaf.Cert, current: newCA.Cert}
	ctx := context.Background()
	requested := func(i int) bool {
		crt := &certmanagerv1.Certificate{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: "kcp-system", Name: certificates.Name(fmt.Sprintf("runtime-%d", i))}, crt); err != nil {
			t.Fatal(err)
		}
		for _, cond := range crt.Status.Conditions {
			if cond.Type == certmanagerv1.CertificateConditionIssuing && cond.Status == "True" {
				return true
			}
		}
		return false
	}
	push := func(i int) time.Duration {
		t.Helper()
		wait, err := k.AfterPush(ctx, kyma, fmt.Sprintf("kcp-system/runtime-%d", i), fmt.Sprintf("runtime-%d", i), tr)
		if err != nil {
			t.Fatal(err)
		}
		return wait
	}

	// All runtimes come at once (a published bundle re-reconciles all):
	// the first is renewed, the k-th gets the slot k/rate from now.
	// Slots are compared as due times from the start, so how long each
	// call takes does not matter.
	waits := make([]time.Duration, n)
	start := time.Now()
	for i := range n {
		waits[i] = push(i)
		if waits[i] > 0 {
			waits[i] = time.Since(start) + waits[i] // due, from start
		}
	}
	if waits[0] != 0 || !requested(0) {
		t.Fatalf("the first runtime waits %s (requested %v), want an immediate renewal", waits[0], requested(0))
	}
	for k := 1; k < n; k++ {
		want := time.Duration(k) * 200 * time.Millisecond
		if waits[k] < want-20*time.Millisecond || waits[k] > want+200*time.Millisecond || requested(k) {
			t.Errorf("runtime %d: due after %s (requested %v), want about %s", k, waits[k], requested(k), want)
		}
	}
	waits[n-1] -= time.Since(start) // what is left of the last slot
	// Coming back early (another event) keeps the slot: no new reservation.
	if w := push(n - 1); w > waits[n-1]+20*time.Millisecond || w < waits[n-1]-200*time.Millisecond {
		t.Errorf("runtime %d back early: waits %s, want what is left of its slot (%s)", n-1, w, waits[n-1])
	}
	// Its slot is due: renewed, the slot released.
	k.renewalSlots.Store("kcp-system/runtime-3", time.Now().Add(-time.Millisecond))
	if w := push(3); w != 0 || !requested(3) {
		t.Fatalf("runtime 3 with its slot due: waits %s, requested %v", w, requested(3))
	}
	if _, held := k.renewalSlots.Load("kcp-system/runtime-3"); held {
		t.Error("runtime 3 still holds a slot after its renewal")
	}
	// A runtime whose certificate is signed by the current CA drops its slot.
	current, err := newCA.Issue(pki.LeafOptions{CommonName: "runtime"})
	if err != nil {
		t.Fatal(err)
	}
	if w, err := k.AfterPush(ctx, kyma, "kcp-system/runtime-4", "runtime-4", RuntimeTrust{leaf: current.Cert, current: newCA.Cert}); err != nil || w != 0 {
		t.Fatalf("runtime 4 renewed: waits %s, %v", w, err)
	}
	if _, held := k.renewalSlots.Load("kcp-system/runtime-4"); held {
		t.Error("runtime 4 still holds a slot with a certificate of the current CA")
	}
}
