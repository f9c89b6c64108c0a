package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// A manager's streak starts at its first retriable failure, keeps that
// start while failures go on, and ends with a delivery; refused bodies say
// nothing about the path.
func TestFailingManagers(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	d := New(Config{Clock: clk}, &scripted{}, logr.Discard())
	d.noteStreak("a", Result{Outcome: Retriable, Status: 404})
	clk.Step(10 * time.Second)
	d.noteStreak("b", Result{Outcome: Retriable, Err: errors.New("refused")})
	d.noteStreak("c", Result{Outcome: Rejected, Status: 400})
	clk.Step(50 * time.Second)
	d.noteStreak("a", Result{Outcome: Retriable, Status: 503})
	got := d.FailingManagers()
	want := []contract.ManagerDelivery{{Name: "a", Result: "5xx", FailingSeconds: 60}, {Name: "b", Result: "transport", FailingSeconds: 50}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("failing %v, want %v", got, want)
	}
	d.noteStreak("a", Result{Outcome: Delivered, Status: 200})
	if got := d.FailingManagers(); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("after a's delivery: %v", got)
	}
	d.Recovered()
	if got := d.FailingManagers(); len(got) != 0 {
		t.Fatalf("after the path recovered: %v", got)
	}
}

func TestFailingManagersBounded(t *testing.T) {
	d := New(Config{}, &scripted{}, logr.Discard())
	for i := range 100 {
		d.noteStreak("m"+string(rune('a'+i%26))+string(rune('a'+i/26)), Result{Outcome: Retriable, Status: 503})
	}
	got := d.FailingManagers()
	if len(got) != contract.MaxHealthManagers {
		t.Fatalf("%d managers reported, want %d", len(got), contract.MaxHealthManagers)
	}
	b, _ := json.Marshal(contract.HealthReport{Managers: got})
	if _, err := contract.ParseHealthReport(b); err != nil {
		t.Fatalf("the KCP would refuse the report: %v", err)
	}
}

// The report goes to contract.HealthPath over the sender's client and
// carries the failing managers; a 503 (a replica that does not evaluate)
// is tried again.
func TestHealthReporterRetriesAndCounts(t *testing.T) {
	var mu sync.Mutex
	var bodies []contract.HealthReport
	n := 0
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != contract.HealthPath || r.Method != http.MethodPost {
			http.NotFound(w, r)
			return
		}
		b := make([]byte, contract.MaxHealthReportBytes+1)
		k, _ := r.Body.Read(b)
		rep, err := contract.ParseHealthReport(b[:k])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		bodies = append(bodies, rep)
		n++
		if n < 0 {
			http.Error(w, "gateway", http.StatusServiceUnavailable)
			return
		}
		if n <= 2 {
			http.Error(w, "not evaluating", http.StatusMisdirectedRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer srv.Close()
	sender, err := NewHTTPSender(srv.Listener.Addr().String(), srv.Client)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	failing := []contract.ManagerDelivery{{Name: "lifecycle-manager", Result: "404", FailingSeconds: 70}}
	d := &fakeResyncer{failing: failing, managers: []string{"lifecycle-manager", "module-sync"}}
	h := NewHealthReporter(HealthConfig{Interval: time.Minute, Attempts: 3, RetryDelay: time.Millisecond, Registerer: reg},
		sender, d, logr.Discard())
	if !h.Report(context.Background()) {
		t.Fatal("report not taken on the third attempt")
	}
	if len(bodies) != 3 || len(bodies[2].Managers) != 1 || bodies[2].Managers[0] != failing[0] {
		t.Fatalf("bodies %v", bodies)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_health_reports_total", "result", "4xx"); got != 2 {
		t.Fatalf("421 attempts %v, want 2", got)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_health_reports_total", "result", "2xx"); got != 1 {
		t.Fatalf("2xx attempts %v, want 1", got)
	}
	if len(d.resyncs) != 0 {
		t.Fatalf("resyncs %v after 421s from a path that works", d.resyncs)
	}
	// A 503 (the gateway, ext-authz): given up at once (the next interval
	// sends anew), and the next report taken asks for a resync of every
	// manager.
	mu.Lock()
	n = -10
	mu.Unlock()
	if h.Report(context.Background()) {
		t.Fatal("a report answered 503 was taken")
	}
	mu.Lock()
	if n != -9 {
		t.Fatalf("%d attempts after a 503, want 1", n+10)
	}
	mu.Unlock()
	mu.Lock()
	n = 100
	mu.Unlock()
	if !h.Report(context.Background()) || len(d.resyncs) != 2 || d.expedited != 1 {
		t.Fatalf("after recovery: resyncs %v (want one per manager), recovered %d times (want 1)", d.resyncs, d.expedited)
	}
	// The report that ended the outage named no manager: their streaks
	// were the outage's.
	mu.Lock()
	last := bodies[len(bodies)-1]
	mu.Unlock()
	if len(last.Managers) != 0 {
		t.Fatalf("the first report after the outage names %v", last.Managers)
	}
}

// fakeResyncer stands for the Dispatcher.
type fakeResyncer struct {
	expedited int
	failing   []contract.ManagerDelivery
	managers  []string
	resyncs   []string
}

func (f *fakeResyncer) FailingManagers() []contract.ManagerDelivery { return f.failing }
func (f *fakeResyncer) Recovered()                                  { f.expedited++ }
func (f *fakeResyncer) Managers() []string                          { return f.managers }
func (f *fakeResyncer) Resync(m string, r contract.ResyncReason) {
	f.resyncs = append(f.resyncs, m+"/"+string(r))
}

// A 421 (a KCP replica that does not evaluate) is no broken path; the KCP
// asking for a resync is.
func TestHealthReporterMisdirectedAndAskedResync(t *testing.T) {
	status := http.StatusMisdirectedRequest
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if status == http.StatusOK {
			_, _ = w.Write([]byte(`{"resync":true}`))
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	sender, err := NewHTTPSender(srv.Listener.Addr().String(), srv.Client)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeResyncer{managers: []string{"m"}}
	h := NewHealthReporter(HealthConfig{Interval: time.Minute, Attempts: 2, RetryDelay: time.Millisecond}, sender, d, logr.Discard())
	if h.Report(context.Background()) {
		t.Fatal("421 taken")
	}
	status = http.StatusNoContent
	if !h.Report(context.Background()) || len(d.resyncs) != 0 {
		t.Fatalf("resyncs %v after 421s", d.resyncs)
	}
	status = http.StatusOK
	if !h.Report(context.Background()) || len(d.resyncs) != 1 || d.resyncs[0] != "m/recovered" {
		t.Fatalf("resyncs %v, want m/recovered asked by the KCP", d.resyncs)
	}
}
