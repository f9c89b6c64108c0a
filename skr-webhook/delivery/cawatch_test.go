package delivery

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// A CA rotation changes ca.crt alone (old + new CA during the overlap): the
// client picks it up without a restart, keeps delivering, and ignores a
// broken file.
func TestWatchCAReloadsABundleAndKeepsTrustOnGarbage(t *testing.T) {
	k := startKCP(t, kcpstub.Options{})
	certs := &swappable{}
	certs.set(t, k.client)
	c, s := newSender(t, k, certs, time.Second)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go c.WatchCA(ctx, 10*time.Millisecond)

	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	caPEM := func() string { c.mu.Lock(); defer c.mu.Unlock(); return string(c.caPEM) }

	next, err := pki.NewCA("kcp-test-ca-2")
	if err != nil {
		t.Fatal(err)
	}
	bundle := append(append([]byte{}, k.ca.PEM...), next.PEM...)
	before := c.HTTP()
	if err := os.WriteFile(k.caFile, bundle, 0o600); err != nil {
		t.Fatal(err)
	}
	waitFor("the bundle to be loaded", func() bool { return caPEM() == string(bundle) })
	if c.HTTP() == before {
		t.Fatal("ca.crt changed but the client was not rebuilt")
	}
	if r := s.Send(context.Background(), "m", watch("after-bundle")); r.Outcome != Delivered {
		t.Fatalf("delivery with the bundle: %+v", r)
	}

	loaded := c.HTTP()
	if err := os.WriteFile(k.caFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The watcher sees the garbage on its next ticks and keeps the bundle.
	time.Sleep(50 * time.Millisecond)
	if c.HTTP() != loaded || caPEM() != string(bundle) {
		t.Fatal("a garbage CA file replaced the trust in use")
	}
	if r := s.Send(context.Background(), "m", watch("after-garbage")); r.Outcome != Delivered {
		t.Fatalf("delivery after garbage: %+v", r)
	}
}
