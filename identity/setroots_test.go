package identity_test

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func poolOf(cas ...*pki.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// TestSetRoots: replaced roots take effect on the next Verify, including for
// certificates whose chain was verified (and cached) against the roots
// before: a CA removed is refused from then on, a CA added is accepted.
func TestSetRoots(t *testing.T) {
	caA, err := pki.NewCA("ca-a")
	if err != nil {
		t.Fatal(err)
	}
	caB, err := pki.NewCA("ca-b")
	if err != nil {
		t.Fatal(err)
	}
	lookup := mapLookup{runtimes: map[string]identity.Runtime{
		"runtime-a": {SKRDomain: "a.example.com"}, "runtime-b": {SKRDomain: "b.example.com"},
	}}
	fromA := gatewayXFCC(issue(t, caA, pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"a.example.com"}}))
	fromB := gatewayXFCC(issue(t, caB, pki.LeafOptions{CommonName: "runtime-b", DNSNames: []string{"b.example.com"}}))

	// Roots from the field (generation 0), then replaced.
	v := &identity.Verifier{Lookup: lookup, Roots: poolOf(caA)}
	check := func(step, header string, allowed bool) {
		t.Helper()
		_, err := v.Verify(context.Background(), header, "")
		var d *identity.Denial
		switch {
		case allowed && err != nil:
			t.Errorf("%s: %v, want allowed", step, err)
		case !allowed && (!errors.As(err, &d) || d.Reason != contract.ReasonInvalidCertificate):
			t.Errorf("%s: %v, want invalid-certificate", step, err)
		}
	}
	check("roots A (field): A", fromA, true)
	check("roots A (field): A again, from the cache", fromA, true)
	check("roots A (field): B", fromB, false)

	v.SetRoots(poolOf(caA, caB))
	check("roots A+B: A (cached verification of the roots before)", fromA, true)
	check("roots A+B: B", fromB, true)

	v.SetRoots(poolOf(caB))
	check("roots B: A, verified and cached under A+B", fromA, false)
	check("roots B: A again", fromA, false)
	check("roots B: B", fromB, true)

	v.SetRoots(poolOf(caA))
	check("roots A: B, verified and cached under B", fromB, false)
	check("roots A: A", fromA, true)

	v.SetRoots(nil)
	check("no roots: B (no chain required)", fromB, true)
}

// TestSetRootsConcurrent: SetRoots while Verify runs in other goroutines
// (run with -race). Every answer is one the roots of some moment allow, and
// once the last SetRoots returned, the roots it set decide.
func TestSetRootsConcurrent(t *testing.T) {
	caA, err := pki.NewCA("ca-a")
	if err != nil {
		t.Fatal(err)
	}
	caB, err := pki.NewCA("ca-b")
	if err != nil {
		t.Fatal(err)
	}
	lookup := mapLookup{runtimes: map[string]identity.Runtime{}}
	var headers []string
	for i := range 16 {
		id, domain := fmt.Sprintf("runtime-%d", i), fmt.Sprintf("skr-%d.example.com", i)
		lookup.runtimes[id] = identity.Runtime{ID: id, SKRDomain: domain}
		headers = append(headers, gatewayXFCC(issue(t, caA, pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})))
	}
	v := &identity.Verifier{Lookup: lookup}
	v.SetRoots(poolOf(caA))
	var stop atomic.Bool
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for n := 0; !stop.Load(); n++ {
				_, err := v.Verify(context.Background(), headers[(w+n)%len(headers)], "")
				var d *identity.Denial
				if err != nil && (!errors.As(err, &d) || d.Reason != contract.ReasonInvalidCertificate) {
					errs <- err
					return
				}
			}
		}()
	}
	for i := range 200 {
		if i%2 == 0 {
			v.SetRoots(poolOf(caB))
		} else {
			v.SetRoots(poolOf(caA, caB))
		}
	}
	v.SetRoots(poolOf(caB))
	stop.Store(true)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for _, h := range headers {
		if _, err := v.Verify(context.Background(), h, ""); err == nil {
			t.Fatal("a certificate of CA A is allowed after the roots were set to B")
		}
	}
}

// TestSetRootsAllocations: with roots, a Verify of a certificate verified
// before (the cached chain) costs no allocation more than without roots:
// reading the roots is one atomic load.
func TestSetRootsAllocations(t *testing.T) {
	ca, err := pki.NewCA("alloc-ca")
	if err != nil {
		t.Fatal(err)
	}
	lookup := mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {SKRDomain: "skr1.example.com"}}}
	header := gatewayXFCC(issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}}))
	allocs := func(v *identity.Verifier) float64 {
		if _, err := v.Verify(context.Background(), header, ""); err != nil {
			t.Fatal(err)
		}
		return testing.AllocsPerRun(100, func() {
			if _, err := v.Verify(context.Background(), header, ""); err != nil {
				t.Fatal(err)
			}
		})
	}
	without := allocs(&identity.Verifier{Lookup: lookup})
	withRoots := &identity.Verifier{Lookup: lookup}
	withRoots.SetRoots(poolOf(ca))
	if got := allocs(withRoots); got > without {
		t.Errorf("a cached Verify with roots allocates %v times, without roots %v", got, without)
	}
	t.Logf("allocations per cached Verify: %v (without roots), the same with roots", without)
}
