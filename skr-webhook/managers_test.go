package main

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

type recordingSink struct {
	mu    sync.Mutex
	sets  [][]string
	beats [][]string
	seen  []string
}

func (r *recordingSink) SetManagers(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sets = append(r.sets, names)
}

func (r *recordingSink) SetHeartbeats(names []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.beats = append(r.beats, names)
}

func (r *recordingSink) lastBeats() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.beats) == 0 {
		return nil
	}
	return r.beats[len(r.beats)-1]
}

func (r *recordingSink) SeeManager(name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, name)
}

func (r *recordingSink) last() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.sets) == 0 {
		return nil
	}
	return r.sets[len(r.sets)-1]
}

func TestReadManagers(t *testing.T) {
	dir := t.TempDir()
	write := func(content string) string {
		p := filepath.Join(dir, "managers")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	names, beats, err := readManagers(write("# rendered by vs-controller\nlifecycle-manager\n\n  module-sync  heartbeats \n"))
	if err != nil || strings.Join(names, ",") != "lifecycle-manager,module-sync" || strings.Join(beats, ",") != "module-sync" {
		t.Fatalf("%v %v %v", names, beats, err)
	}
	names, beats, err = readManagers(write("good\nBad_Name\nother heartbeat\nlast heartbeats extra\n"))
	if err == nil || !strings.Contains(err.Error(), `"Bad_Name" is not a valid manager name`) ||
		!strings.Contains(err.Error(), `:3: "heartbeat" after the manager name is not "heartbeats"`) ||
		!strings.Contains(err.Error(), `:4: "heartbeats extra"`) ||
		strings.Join(names, ",") != "good" || len(beats) != 0 {
		t.Fatalf("%v %v %v", names, beats, err)
	}
	if _, _, err := readManagers(write(strings.Repeat("a\n", maxManagersFileBytes))); err == nil {
		t.Fatal("oversized file accepted")
	}
	if names, beats, err := readManagers(write("")); err != nil || len(names) != 0 || len(beats) != 0 {
		t.Fatalf("empty file: %v %v %v", names, beats, err)
	}
}

// The managers file is re-read while running (filewatch; driven here by
// Reload): a change reaches the sink without a restart; an unreadable file,
// or one with only invalid lines, keeps the last list.
func TestManagersWatcher(t *testing.T) {
	g := gomega.NewWithT(t)
	p := filepath.Join(t.TempDir(), "managers")
	if err := os.WriteFile(p, []byte("a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sink := &recordingSink{}
	w := managersWatcher(p, time.Hour, sink, logr.Discard())
	g.Expect(w.Reload()).To(gomega.BeTrue())
	g.Expect(sink.last()).To(gomega.Equal([]string{"a"}))
	// A ConfigMap volume swaps the file: write a new one and rename it in.
	tmp := p + ".new"
	if err := os.WriteFile(tmp, []byte("a\nb heartbeats\nNot_Valid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, p); err != nil {
		t.Fatal(err)
	}
	g.Expect(w.Reload()).To(gomega.BeTrue())
	g.Expect(sink.last()).To(gomega.Equal([]string{"a", "b"}))
	g.Expect(sink.lastBeats()).To(gomega.Equal([]string{"b"}))
	g.Expect(w.Reload()).To(gomega.BeFalse(), "unchanged content handed on again")
	if err := os.WriteFile(p, []byte("Only_Invalid\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	g.Expect(w.Reload()).To(gomega.BeFalse())
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	g.Expect(w.Reload()).To(gomega.BeFalse())
	g.Expect(sink.last()).To(gomega.Equal([]string{"a", "b"}))
	sink.mu.Lock()
	n := len(sink.sets)
	sink.mu.Unlock()
	if n != 2 {
		t.Fatalf("%d updates, want 2", n)
	}
}

func TestSeeManagersOnlyForValidPosts(t *testing.T) {
	sink := &recordingSink{}
	h := seeManagers(sink, http404{})
	for _, tc := range []struct{ method, path string }{
		{"POST", "/validate/lifecycle-manager"}, {"GET", "/validate/other"}, {"POST", "/validate/Bad_Name"}, {"POST", "/x"},
	} {
		h.ServeHTTP(nopWriter{}, mustRequest(t, tc.method, tc.path))
	}
	if !slices.Equal(sink.seen, []string{"lifecycle-manager"}) {
		t.Fatalf("seen %v", sink.seen)
	}
}

type http404 struct{}

func (http404) ServeHTTP(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNotFound) }

type nopWriter struct{}

func (nopWriter) Header() http.Header         { return http.Header{} }
func (nopWriter) Write(b []byte) (int, error) { return len(b), nil }
func (nopWriter) WriteHeader(int)             {}

func mustRequest(t *testing.T, method, path string) *http.Request {
	t.Helper()
	r, err := http.NewRequest(method, "https://webhook"+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// FuzzReadManagers: whatever the managers file holds (issue 33: its opt-in
// line decides heartbeats), every name read is a valid manager, every
// heartbeat manager is one of them, a refused line is an error and never a
// manager, and what was read, written back as vs-controller renders it,
// reads the same.
func FuzzReadManagers(f *testing.F) {
	for _, s := range []string{
		"# rendered by vs-controller\nlifecycle-manager\n\n  module-sync  heartbeats \n",
		"good\nBad_Name\nother heartbeat\nlast heartbeats extra\n",
		"a heartbeats\na\n", "\t heartbeats\n", "x\theartbeats\n", "",
	} {
		f.Add(s)
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, content string) {
		p := filepath.Join(dir, "managers")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		names, beats, err := readManagers(p)
		if len(content) > maxManagersFileBytes {
			if err == nil || names != nil {
				t.Fatalf("oversized file: %v %v", names, err)
			}
			return
		}
		in := map[string]bool{}
		for _, n := range names {
			if !contract.ValidManager(n) {
				t.Fatalf("invalid manager %q read", n)
			}
			in[n] = true
		}
		for _, h := range beats {
			if !in[h] {
				t.Fatalf("heartbeat manager %q is no manager", h)
			}
		}
		var b strings.Builder
		hb := map[string]bool{}
		for _, h := range beats {
			hb[h] = true
		}
		for _, n := range names {
			if hb[n] {
				b.WriteString(n + " " + contract.ManagerHeartbeats + "\n")
				delete(hb, n)
			} else {
				b.WriteString(n + "\n")
			}
		}
		if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
			t.Fatal(err)
		}
		names2, beats2, err2 := readManagers(p)
		if err2 != nil || strings.Join(names2, "\n") != strings.Join(names, "\n") || len(beats2) > len(beats) {
			t.Fatalf("round trip of %q: %v %v %v, want %v %v", b.String(), names2, beats2, err2, names, beats)
		}
		_ = err
	})
}
