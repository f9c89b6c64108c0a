package cafile

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

// fixture is a Watcher on a CA file in a kubelet-style volume, with a log
// and the roots it applied.
type fixture struct {
	t       *testing.T
	vol     *volume.Dir
	w       *Watcher
	metrics *Metrics
	mu      sync.Mutex
	applied []*filewatch.CABundle
	log     bytes.Buffer
}

func newFixture(t *testing.T, initial []byte) *fixture {
	t.Helper()
	vol, err := volume.New(filepath.Join(t.TempDir(), "ca"))
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Write(map[string][]byte{"ca.crt": initial}); err != nil {
		t.Fatal(err)
	}
	m, err := NewMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{t: t, vol: vol, metrics: m}
	f.w = &Watcher{Path: vol.File("ca.crt"), Metrics: m, Interval: time.Hour,
		Apply: func(b *filewatch.CABundle) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.applied = append(f.applied, b)
		},
		Log: funcr.New(func(prefix, args string) {
			f.mu.Lock()
			defer f.mu.Unlock()
			f.log.WriteString(prefix + " " + args + "\n")
		}, funcr.Options{}),
	}
	if err := f.w.Init(); err != nil {
		t.Fatal(err)
	}
	return f
}

func (f *fixture) write(data []byte) {
	f.t.Helper()
	if err := f.vol.Write(map[string][]byte{"ca.crt": data}); err != nil {
		f.t.Fatal(err)
	}
}

// inUse is the subjects of the last bundle applied ("" before any).
func (f *fixture) inUse() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.applied) == 0 {
		return ""
	}
	var names []string
	for _, c := range f.applied[len(f.applied)-1].CAs {
		names = append(names, c.Subject.CommonName)
	}
	return strings.Join(names, "+")
}

func (f *fixture) logText() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.log.String()
}

func (f *fixture) reloads(result string) float64 {
	return testutil.ToFloat64(f.metrics.reloads.WithLabelValues(result))
}

// TestReload: every case of one reload, driven by Reload (no watch, no
// timing): a change applies a usable bundle, a bad one keeps the bundle in
// use and is counted and logged once.
func TestReload(t *testing.T) {
	a, b := pki.MustCA(t, "ca-a"), pki.MustCA(t, "ca-b")
	expired, err := pki.NewCAValid("ca-expired", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	f := newFixture(t, a.PEM)
	if f.w.Reload() {
		t.Fatal("the initial content was applied again")
	}
	if f.w.Reload() || f.reloads(ResultOK)+f.reloads(ResultError) != 0 {
		t.Fatal("an unchanged file counted as a reload")
	}

	f.write(pki.Bundle(a, b))
	if !f.w.Reload() || f.inUse() != "ca-a+ca-b" {
		t.Fatalf("A+B not applied: in use %q", f.inUse())
	}
	f.write(b.PEM)
	if !f.w.Reload() || f.inUse() != "ca-b" {
		t.Fatalf("B not applied: in use %q", f.inUse())
	}
	if got := f.reloads(ResultOK); got != 2 {
		t.Errorf("ok reloads %v, want 2", got)
	}
	if got := testutil.ToFloat64(f.metrics.notAfter); got != float64(b.Cert.NotAfter.Unix()) {
		t.Errorf("not-after gauge %v, want B's %d", got, b.Cert.NotAfter.Unix())
	}

	for i, bad := range [][]byte{[]byte("garbage"), nil, expired.PEM, append(pki.Bundle(a), "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"...)} {
		f.write(bad)
		if f.w.Reload() || f.inUse() != "ca-b" {
			t.Fatalf("bad file %d: in use %q, want ca-b kept", i, f.inUse())
		}
		if f.w.Reload() {
			t.Fatalf("bad file %d applied on the second read", i)
		}
		if got := f.reloads(ResultError); got != float64(i+1) {
			t.Errorf("bad file %d: %v errors counted, want %d (once per content)", i, got, i+1)
		}
		if testutil.ToFloat64(f.metrics.valid) != 0 {
			t.Errorf("bad file %d: ca_file_valid is not 0", i)
		}
	}
	if n := strings.Count(f.logText(), "CA file changed but is unusable; keeping what is in use"); n != 4 {
		t.Errorf("%d error lines for 4 bad files, want 4:\n%s", n, f.logText())
	}

	// Unreadable: the symlink's target is gone.
	if err := os.Remove(f.w.Path); err != nil {
		t.Fatal(err)
	}
	if f.w.Reload() || f.inUse() != "ca-b" || f.reloads(ResultError) != 5 {
		t.Fatalf("missing file: in use %q, %v errors", f.inUse(), f.reloads(ResultError))
	}
	f.w.Reload()
	if f.reloads(ResultError) != 5 || !strings.Contains(f.logText(), "CA file unreadable; keeping what is in use") {
		t.Fatalf("missing file: %v errors, log:\n%s", f.reloads(ResultError), f.logText())
	}

	// Back to the content in use: nothing applied, the file is valid again.
	f.write(b.PEM)
	if f.w.Reload() || testutil.ToFloat64(f.metrics.valid) != 1 {
		t.Fatal("the content in use, read again, was applied or not reported valid")
	}
	f.write(a.PEM)
	if !f.w.Reload() || f.inUse() != "ca-a" || f.reloads(ResultOK) != 3 {
		t.Fatalf("A after the bad files: in use %q, %v ok", f.inUse(), f.reloads(ResultOK))
	}
}

// TestWatch: Run sees kubelet's atomic ..data swaps through fsnotify (the
// poll interval is an hour, so only the file events can trigger a reload).
func TestWatch(t *testing.T) {
	g := NewWithT(t)
	a, b := pki.MustCA(t, "ca-a"), pki.MustCA(t, "ca-b")
	f := newFixture(t, a.PEM)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.w.Run(ctx) }()
	defer func() {
		cancel()
		g.Expect(<-done).To(Succeed())
	}()
	g.Eventually(f.logText).Should(ContainSubstring(`"fsnotify"=true`))
	g.Expect(testutil.ToFloat64(f.metrics.cas)).To(Equal(1.0))

	f.write(pki.Bundle(a, b))
	g.Eventually(f.inUse).Should(Equal("ca-a+ca-b"))
	g.Expect(testutil.ToFloat64(f.metrics.cas)).To(Equal(2.0))
	f.write(b.PEM)
	g.Eventually(f.inUse).Should(Equal("ca-b"))
	f.write([]byte("garbage"))
	g.Eventually(func() float64 { return f.reloads(ResultError) }).Should(Equal(1.0))
	g.Expect(f.inUse()).To(Equal("ca-b"))
	g.Expect(f.w.Current().CAs[0].Subject.CommonName).To(Equal("ca-b"))
	f.write(a.PEM)
	g.Eventually(f.inUse).Should(Equal("ca-a"))
	g.Expect(f.reloads(ResultOK)).To(Equal(3.0))

	// A writer that replaces the file itself (not a volume) is seen too.
	plain := filepath.Join(t.TempDir(), "ca.pem")
	g.Expect(os.WriteFile(plain, a.PEM, 0o600)).To(Succeed())
	f2 := newFixture(t, a.PEM)
	f2.w.Path = plain
	go func() { _ = f2.w.Run(ctx) }()
	g.Eventually(f2.logText).Should(ContainSubstring(`"fsnotify"=true`))
	tmp := plain + ".tmp"
	g.Expect(os.WriteFile(tmp, b.PEM, 0o600)).To(Succeed())
	g.Expect(os.Rename(tmp, plain)).To(Succeed())
	g.Eventually(f2.inUse).Should(Equal("ca-b"))
	g.Expect(os.WriteFile(plain, pki.Bundle(a, b), 0o600)).To(Succeed()) // in place
	g.Eventually(f2.inUse).Should(Equal("ca-a+ca-b"))
}

// TestPoll: without file events (the directory cannot be watched) the file
// is re-read every Interval.
func TestPoll(t *testing.T) {
	g := NewWithT(t)
	a, b := pki.MustCA(t, "ca-a"), pki.MustCA(t, "ca-b")
	f := newFixture(t, a.PEM)
	f.w.Interval = 20 * time.Millisecond
	f.w.pollOnly = true
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = f.w.Run(ctx) }()
	g.Eventually(f.logText).Should(ContainSubstring(`"fsnotify"=false`))
	f.write(b.PEM)
	g.Eventually(f.inUse).Should(Equal("ca-b"))
}
