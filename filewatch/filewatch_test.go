package filewatch_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

// recorder is a Watcher's Load and Report.
type recorder struct {
	mu       sync.Mutex
	loaded   []string
	outcomes []filewatch.Outcome
}

func (r *recorder) load(contents [][]byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := string(bytes.Join(contents, []byte("|")))
	if bytes.Contains([]byte(s), []byte("bad")) {
		return errors.New("refused")
	}
	r.loaded = append(r.loaded, s)
	return nil
}

func (r *recorder) report(o filewatch.Outcome, _ error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.outcomes = append(r.outcomes, o)
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.loaded) == 0 {
		return ""
	}
	return r.loaded[len(r.loaded)-1]
}

// TestReload: every case of one read of two files (a pair like cert and
// key), driven by Reload.
func TestReload(t *testing.T) {
	vol, err := volume.New(filepath.Join(t.TempDir(), "v"))
	if err != nil {
		t.Fatal(err)
	}
	write := func(a, b string) {
		t.Helper()
		if err := vol.Write(map[string][]byte{"a": []byte(a), "b": []byte(b)}); err != nil {
			t.Fatal(err)
		}
	}
	write("a1", "b1")
	r := &recorder{}
	w := &filewatch.Watcher{Name: "test files", Paths: []string{vol.File("a"), vol.File("b")}, Load: r.load, Report: r.report, Log: logr.Discard()}
	if err := w.Init(); err != nil || r.last() != "a1|b1" {
		t.Fatalf("Init: %v, loaded %q", err, r.last())
	}
	if w.Reload() || len(r.loaded) != 1 || len(r.outcomes) != 0 {
		t.Fatalf("unchanged files loaded again: %q %v", r.loaded, r.outcomes)
	}
	write("a1", "b2")
	if !w.Reload() || r.last() != "a1|b2" {
		t.Fatalf("a change of the second file not loaded: %q", r.loaded)
	}
	write("a1", "bad")
	for range 2 { // the second read: the same refused content, not reported again
		if w.Reload() || r.last() != "a1|b2" {
			t.Fatalf("refused content replaced what is in use: %q", r.loaded)
		}
	}
	if err := os.Remove(vol.File("a")); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if w.Reload() {
			t.Fatal("an unreadable file was loaded")
		}
	}
	write("a1", "b2") // back to the content in use
	if w.Reload() || len(r.loaded) != 2 {
		t.Fatalf("the content in use was loaded again: %q", r.loaded)
	}
	want := []filewatch.Outcome{filewatch.Loaded, filewatch.Failed, filewatch.Failed, filewatch.InUseAgain}
	if len(r.outcomes) != len(want) {
		t.Fatalf("outcomes %v, want %v (each once per content or error)", r.outcomes, want)
	}
	for i := range want {
		if r.outcomes[i] != want[i] {
			t.Errorf("outcome %d is %v, want %v", i, r.outcomes[i], want[i])
		}
	}
}

func TestInitRefuses(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "f")
	if err := os.WriteFile(bad, []byte("bad"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	for _, p := range []string{bad, filepath.Join(dir, "missing")} {
		if err := (&filewatch.Watcher{Name: "f", Paths: []string{p}, Load: r.load, Log: logr.Discard()}).Init(); err == nil {
			t.Errorf("%s: Init accepted it", p)
		}
	}
}

// TestRun: kubelet's atomic ..data swaps are seen through fsnotify (the
// poll interval is an hour), and without events by polling.
func TestRun(t *testing.T) {
	for _, pollOnly := range []bool{false, true} {
		t.Run(map[bool]string{false: "fsnotify", true: "poll"}[pollOnly], func(t *testing.T) {
			g := NewWithT(t)
			vol, err := volume.New(filepath.Join(t.TempDir(), "v"))
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(vol.Write(map[string][]byte{"f": []byte("one")})).To(Succeed())
			r := &recorder{}
			w := &filewatch.Watcher{Name: "f", Paths: []string{vol.File("f")}, Load: r.load, Log: logr.Discard(), Interval: time.Hour, PollOnly: pollOnly}
			if pollOnly {
				w.Interval = 10 * time.Millisecond
			}
			g.Expect(w.Init()).To(Succeed())
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- w.Start(ctx) }()
			g.Expect(vol.Write(map[string][]byte{"f": []byte("two")})).To(Succeed())
			g.Eventually(r.last).Should(Equal("two"))
			cancel()
			g.Expect(<-done).To(Succeed())
			g.Expect(w.NeedLeaderElection()).To(BeFalse())
		})
	}
}

func TestKeyPair(t *testing.T) {
	g := NewWithT(t)
	ca, err := pki.NewCA("kp-ca")
	g.Expect(err).NotTo(HaveOccurred())
	one, err := ca.Issue(pki.LeafOptions{CommonName: "one"})
	g.Expect(err).NotTo(HaveOccurred())
	two, err := ca.Issue(pki.LeafOptions{CommonName: "two"})
	g.Expect(err).NotTo(HaveOccurred())
	vol, err := volume.New(filepath.Join(t.TempDir(), "tls"))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(vol.Write(map[string][]byte{"tls.crt": one.CertPEM, "tls.key": one.KeyPEM})).To(Succeed())

	_, err = filewatch.NewKeyPair(vol.File("tls.crt"), vol.File("missing.key"), 0, logr.Discard())
	g.Expect(err).To(HaveOccurred())
	kp, err := filewatch.NewKeyPair(vol.File("tls.crt"), vol.File("tls.key"), 0, logr.Discard())
	g.Expect(err).NotTo(HaveOccurred())
	cn := func() string {
		c, err := kp.GetCertificate(nil)
		g.Expect(err).NotTo(HaveOccurred())
		cc, err := kp.GetClientCertificate(nil)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(cc).To(BeIdenticalTo(c))
		g.Expect(kp.Certificate()).To(BeIdenticalTo(c))
		return c.Leaf.Subject.CommonName
	}
	g.Expect(cn()).To(Equal("one"))
	changed := 0
	kp.OnChange(func() { changed++ })

	// A certificate with another's key: refused, the pair in use stays.
	g.Expect(vol.Write(map[string][]byte{"tls.crt": two.CertPEM, "tls.key": one.KeyPEM})).To(Succeed())
	g.Expect(kp.Reload()).To(BeFalse())
	g.Expect(cn()).To(Equal("one"))
	g.Expect(changed).To(Equal(0))

	g.Expect(vol.Write(map[string][]byte{"tls.crt": two.CertPEM, "tls.key": two.KeyPEM})).To(Succeed())
	g.Expect(kp.Reload()).To(BeTrue())
	g.Expect(cn()).To(Equal("two"))
	g.Expect(changed).To(Equal(1))
}
