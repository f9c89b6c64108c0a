package health

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

func TestHandler(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	tr := NewTracker(clk, 2)
	evaluating := true
	h := tr.Handler(func(string) bool { return evaluating })
	do := func(method, path, id, body string) int {
		r := httptest.NewRequest(method, path, strings.NewReader(body))
		if id != "" {
			r.Header.Set(contract.HeaderRuntimeID, id)
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	ok := `{"managers":[{"name":"m","result":"404","failingSeconds":3}]}`
	for _, tc := range []struct {
		method, path, id, body string
		want                   int
	}{
		{http.MethodPost, contract.HealthPath, "runtime-a", ok, http.StatusNoContent},
		{http.MethodPost, contract.HealthPath, "runtime-a", `{}`, http.StatusNoContent},
		{http.MethodGet, contract.HealthPath, "runtime-a", ``, http.StatusMethodNotAllowed},
		{http.MethodPost, "/v2/m/event", "runtime-a", ok, http.StatusNotFound},
		{http.MethodPost, contract.HealthPath, "", ok, http.StatusUnauthorized},
		{http.MethodPost, contract.HealthPath, strings.Repeat("x", 254), ok, http.StatusUnauthorized},
		{http.MethodPost, contract.HealthPath, "runtime-a", `{"managers":[{"name":"M!"}]}`, http.StatusBadRequest},
		{http.MethodPost, contract.HealthPath, "runtime-a", `{"x":"` + strings.Repeat("y", contract.MaxHealthReportBytes) + `"}`, http.StatusRequestEntityTooLarge},
		{http.MethodPost, contract.HealthPath, "runtime-b", `{}`, http.StatusNoContent},
		{http.MethodPost, contract.HealthPath, "runtime-c", `{}`, http.StatusServiceUnavailable}, // tracker full
	} {
		if got := do(tc.method, tc.path, tc.id, tc.body); got != tc.want {
			t.Errorf("%s %s id=%.10q body=%.30q: %d, want %d", tc.method, tc.path, tc.id, tc.body, got, tc.want)
		}
	}
	if at, failing, ok := tr.Last("runtime-a"); !ok || !at.Equal(clk.Now()) || len(failing) != 0 {
		t.Errorf("runtime-a: %v %v %v (the last report had no failing manager)", at, failing, ok)
	}
	// A recovery asks the webhook, once, for a resync.
	tr.RequestResync("runtime-a")
	r := httptest.NewRequest(http.MethodPost, contract.HealthPath, strings.NewReader(`{}`))
	r.Header.Set(contract.HeaderRuntimeID, "runtime-a")
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	if w.Code != http.StatusOK || strings.TrimSpace(w.Body.String()) != `{"resync":true}` {
		t.Errorf("after RequestResync: %d %q", w.Code, w.Body.String())
	}
	if got := do(http.MethodPost, contract.HealthPath, "runtime-a", `{}`); got != http.StatusNoContent {
		t.Errorf("second report after RequestResync: %d, want 204", got)
	}
	evaluating = false
	if got := do(http.MethodPost, contract.HealthPath, "runtime-a", ok); got != http.StatusMisdirectedRequest {
		t.Errorf("not evaluating: %d, want 421", got)
	}
	// An evaluator that owns some runtimes (a shard) takes only theirs.
	ev := NewEvaluator(Options{Owns: func(id string) bool { return id == "runtime-a" }}, tr, nil, nil, nil, logr.Discard())
	ev.running.Store(true)
	h = tr.Handler(ev.Evaluates)
	if got := do(http.MethodPost, contract.HealthPath, "runtime-a", `{}`); got != http.StatusNoContent {
		t.Errorf("owned runtime: %d, want 204", got)
	}
	if got := do(http.MethodPost, contract.HealthPath, "runtime-b", `{}`); got != http.StatusMisdirectedRequest {
		t.Errorf("runtime of another shard: %d, want 421", got)
	}
}

// BenchmarkReport is one report through the handler into the tracker, at
// 10,000 runtimes (the vs-controller side of a report's cost).
func BenchmarkReport(b *testing.B) {
	tr := NewTracker(nil, MaxRuntimes)
	h := tr.Handler(func(string) bool { return true })
	ids := make([]string, 10000)
	for i := range ids {
		ids[i] = fleetRuntimeID(i)
	}
	body := `{"managers":[{"name":"lifecycle-manager","result":"5xx","failingSeconds":12}]}`
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		r := httptest.NewRequest(http.MethodPost, contract.HealthPath, strings.NewReader(body))
		r.Header.Set(contract.HeaderRuntimeID, ids[i%len(ids)])
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		if w.Code != http.StatusNoContent {
			b.Fatalf("status %d", w.Code)
		}
		i++
	}
}

// BenchmarkRound is one evaluation round over 10,000 heard runtimes with no
// probe due (the steady state between checks).
func BenchmarkRound(b *testing.B) {
	f := &fixture{clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), prober: newFakeProber(), rec: &recorder{}}
	for i := range 10000 {
		f.ids = append(f.ids, fleetRuntimeID(i))
	}
	f.restart()
	for _, id := range f.ids {
		f.tracker.Observe(id, contract.HealthReport{})
	}
	ctx := context.Background()
	if err := f.ev.Round(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := f.ev.Round(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
