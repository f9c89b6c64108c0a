package delivery

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// A CA rotation changes ca.crt alone (old + new CA during the overlap):
// Reload (called by the webhook's file watcher) rebuilds the client, which
// keeps delivering; a broken file keeps the trust in use.
func TestReloadTakesABundleAndKeepsTrustOnGarbage(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	c, s := newSender(t, k, certs, time.Second)
	caPEM := func() string { c.mu.Lock(); defer c.mu.Unlock(); return string(c.caPEM) }

	next, err := pki.NewCA("kcp-test-ca-2")
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, k.ca.PEM...), next.PEM...)
	before := c.HTTP()
	if err := c.Reload(); err != nil || c.HTTP() != before {
		t.Fatalf("an unchanged CA file rebuilt the client (%v)", err)
	}
	if err := os.WriteFile(k.caFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); err != nil || caPEM() != string(bundle) {
		t.Fatalf("the bundle was not loaded: %v", err)
	}
	if c.HTTP() == before {
		t.Fatal("ca.crt changed but the client was not rebuilt")
	}
	if r := s.Send(context.Background(), "m", watch("after-bundle")); r.Outcome != Delivered {
		t.Fatalf("delivery with the bundle: %+v", r)
	}

	loaded := c.HTTP()
	leaf, err := next.Issue(pki.LeafOptions{CommonName: "not-a-ca"})
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range [][]byte{[]byte("garbage"), leaf.CertPEM} {
		if err := os.WriteFile(k.caFile, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := c.Reload(); err == nil {
			t.Fatalf("Reload accepted %q", bad)
		}
		if c.HTTP() != loaded || caPEM() != string(bundle) {
			t.Fatal("a bad CA file replaced the trust in use")
		}
	}
	if r := s.Send(context.Background(), "m", watch("after-garbage")); r.Outcome != Delivered {
		t.Fatalf("delivery after garbage: %+v", r)
	}
}
