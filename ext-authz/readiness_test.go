package main

import (
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

type fakeKymas struct {
	synced  chan struct{}
	failing time.Time
}

func (f *fakeKymas) Synced() <-chan struct{} { return f.synced }
func (f *fakeKymas) FailingSince() time.Time { return f.failing }

// TestReadiness covers each rule: not ready before the Kyma store synced,
// nor while listing and watching it fails for longer than the bound, nor
// without a CA bundle or once every CA of it expired.
func TestReadiness(t *testing.T) {
	now := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	ca := &x509.Certificate{NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour)}
	bundle := &filewatch.CABundle{CAs: []*x509.Certificate{{NotAfter: now.Add(-time.Minute)}, ca}}
	k := &fakeKymas{synced: make(chan struct{})}
	r := readiness{kymas: k, lostAfter: time.Minute, now: func() time.Time { return now }}
	want := func(sub string) {
		t.Helper()
		err := r.check()
		switch {
		case sub == "" && err != nil:
			t.Fatalf("not ready: %v", err)
		case sub != "" && (err == nil || !strings.Contains(err.Error(), sub)):
			t.Fatalf("ready error %v, want one with %q", err, sub)
		}
	}
	want("not synced")
	close(k.synced)
	want("")

	k.failing = now.Add(-time.Minute) // failing for exactly the bound: still ready
	want("")
	k.failing = now.Add(-time.Minute - time.Second)
	want("not listed or watched since 2026-11-25T11:58:59Z")
	k.failing = time.Time{}
	want("")

	// With --ca-file.
	var current *filewatch.CABundle
	r.bundle = func() *filewatch.CABundle { return current }
	want("no CA bundle loaded")
	current = bundle
	want("") // one CA expired, one valid
	now = ca.NotAfter
	want("")
	now = ca.NotAfter.Add(time.Second)
	want("every CA of --ca-file expired")
}
