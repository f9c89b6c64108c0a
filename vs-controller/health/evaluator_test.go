package health

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// fakeProber answers from maps a test sets.
type fakeProber struct {
	mu            sync.Mutex
	config        map[string]Finding
	silent        map[string]Finding
	configCalls   map[string]int
	diagnoseCalls map[string]int
}

func newFakeProber() *fakeProber {
	return &fakeProber{config: map[string]Finding{}, silent: map[string]Finding{}, configCalls: map[string]int{}, diagnoseCalls: map[string]int{}}
}

func (p *fakeProber) Config(_ context.Context, rt Runtime) (Finding, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.configCalls[rt.ID]++
	return p.config[rt.ID], nil
}

func (p *fakeProber) Silent(_ context.Context, rt Runtime) (Finding, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.diagnoseCalls[rt.ID]++
	return p.silent[rt.ID], nil
}

func (p *fakeProber) set(m map[string]Finding, id string, f Finding) {
	p.mu.Lock()
	defer p.mu.Unlock()
	m[id] = f
}

// recorder remembers every change and the last flagged set.
type recorder struct {
	changes []string
	flagged map[string]Finding
}

func (r *recorder) Changed(_ context.Context, rt Runtime, _, to Finding) {
	r.changes = append(r.changes, rt.ID+"="+string(to.Cause))
}
func (r *recorder) Round(_ context.Context, flagged map[string]Finding) { r.flagged = flagged }

type fixture struct {
	clock   *clocktesting.FakeClock
	tracker *Tracker
	prober  *fakeProber
	rec     *recorder
	ev      *Evaluator
	ids     []string
	quiet   map[string]bool // runtimes whose webhook sends no report
	report  map[string]contract.HealthReport
}

func newFixture(t *testing.T, ids ...string) *fixture {
	t.Helper()
	f := &fixture{clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), prober: newFakeProber(),
		rec: &recorder{}, ids: ids, quiet: map[string]bool{}, report: map[string]contract.HealthReport{}}
	f.tracker = NewTracker(f.clock, 1000)
	f.restart()
	return f
}

// restart is a vs-controller restart: everything in memory is gone.
func (f *fixture) restart() {
	f.tracker = NewTracker(f.clock, 1000)
	f.ev = NewEvaluator(Options{Clock: f.clock}, f.tracker, f.runtimes, f.prober, f.rec, logr.Discard())
}

func (f *fixture) runtimes(context.Context) ([]Runtime, error) {
	out := make([]Runtime, 0, len(f.ids))
	for _, id := range f.ids {
		out = append(out, Runtime{ID: id, Kyma: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: id}}})
	}
	return out, nil
}

// run advances the clock in 1 s steps for d: every runtime not quiet
// reports every 30 s (phase by index), the evaluator runs every 10 s.
func (f *fixture) run(t *testing.T, d time.Duration) {
	t.Helper()
	for end := f.clock.Now().Add(d); f.clock.Now().Before(end); {
		f.clock.Step(time.Second)
		s := f.clock.Now().Unix()
		for i, id := range f.ids {
			if !f.quiet[id] && (s+int64(i))%30 == 0 {
				f.tracker.Observe(id, f.report[id])
			}
		}
		if s%10 == 0 {
			if err := f.ev.Round(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// flaggedWithin runs until id is flagged with cause, at most limit, and
// returns how long it took.
func (f *fixture) flaggedWithin(t *testing.T, id string, cause Cause, limit time.Duration) time.Duration {
	t.Helper()
	start := f.clock.Now()
	for f.clock.Since(start) <= limit {
		f.run(t, time.Second)
		if got := f.rec.flagged[id]; got.Cause == cause {
			for other, g := range f.rec.flagged {
				if other != id {
					t.Fatalf("%s flagged too (%s) while only %s is broken", other, g.Cause, id)
				}
			}
			return f.clock.Since(start)
		}
	}
	t.Fatalf("%s not flagged %s within %s (flagged: %v)", id, cause, limit, f.rec.flagged)
	return 0
}

func (f *fixture) clearedWithin(t *testing.T, id string, limit time.Duration) {
	t.Helper()
	start := f.clock.Now()
	for f.clock.Since(start) <= limit {
		f.run(t, time.Second)
		if _, ok := f.rec.flagged[id]; !ok {
			return
		}
	}
	t.Fatalf("%s still flagged %v after %s", id, f.rec.flagged[id], limit)
}

const twoMinutes = 2 * time.Minute

func TestHealthyFleetRaisesNothingAcrossRestarts(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	f.run(t, 10*time.Minute)
	f.restart() // vs-controller restarts: no last-seen in memory
	f.run(t, 10*time.Minute)
	if len(f.rec.changes) != 0 || len(f.rec.flagged) != 0 {
		t.Fatalf("healthy fleet flagged: changes %v", f.rec.changes)
	}
	// The configuration check is spread and periodic, not per report.
	for _, id := range f.ids {
		if n := f.prober.configCalls[id]; n < 12 || n > 15 {
			t.Errorf("%s: %d configuration checks in 20 min, want one per 90 s", id, n)
		}
		if n := f.prober.diagnoseCalls[id]; n != 0 {
			t.Errorf("%s diagnosed %d times while heard", id, n)
		}
	}
}

func TestSilentRuntimeFlaggedWithItsCauseAndCleared(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	f.run(t, 5*time.Minute)
	for _, cause := range []Cause{CauseCertificateExpired, CauseCAUntrusted, CauseSANMismatch, CauseWebhookNotReady, CauseNothingHeard} {
		f.prober.set(f.prober.silent, "b", Finding{Cause: cause, Detail: "seen"})
		f.quiet["b"] = true
		took := f.flaggedWithin(t, "b", cause, twoMinutes)
		t.Logf("%s flagged after %s", cause, took)
		f.quiet["b"] = false
		f.prober.set(f.prober.silent, "b", Finding{})
		f.clearedWithin(t, "b", 40*time.Second)
	}
	// One Event per change: broken, recovered; none per report.
	if len(f.rec.changes) != 10 {
		t.Fatalf("changes %v, want 10", f.rec.changes)
	}
	// Each recovery asks b's webhook for a resync through its next report.
	if ok, resync := f.tracker.Observe("b", contract.HealthReport{}); !ok || !resync {
		t.Fatal("no resync requested after the recovery")
	}
}

func TestSilentWithoutCauseIsNothingHeard(t *testing.T) {
	f := newFixture(t, "a", "b")
	f.run(t, 2*time.Minute)
	f.quiet["a"] = true
	f.flaggedWithin(t, "a", CauseNothingHeard, twoMinutes)
}

func TestWebhookConfigurationFault(t *testing.T) {
	f := newFixture(t, "a", "b", "c")
	f.run(t, 3*time.Minute)
	f.prober.set(f.prober.config, "c", Finding{Cause: CauseWebhookConfigMissing})
	f.flaggedWithin(t, "c", CauseWebhookConfigMissing, twoMinutes)
	f.prober.set(f.prober.config, "c", Finding{})
	f.clearedWithin(t, "c", twoMinutes)
}

func TestDeliveryFailures(t *testing.T) {
	f := newFixture(t, "a", "b")
	f.run(t, 3*time.Minute)
	// b's webhook reports a manager whose deliveries fail; the seconds
	// grow as the streak goes on.
	for _, tc := range []struct {
		class string
		cause Cause
	}{{"404", CauseNoRoute}, {"5xx", CauseDeliveryFailing}, {"403", CauseDeliveryFailing}} {
		start := f.clock.Now()
		for f.rec.flagged["b"].Cause != tc.cause {
			if f.clock.Since(start) > twoMinutes {
				t.Fatalf("%s: not flagged %s within 2 min", tc.class, tc.cause)
			}
			f.report["b"] = contract.HealthReport{Managers: []contract.ManagerDelivery{{Name: "lifecycle-manager", Result: tc.class,
				FailingSeconds: int64(f.clock.Since(start) / time.Second)}}}
			f.run(t, time.Second)
		}
		if m := f.rec.flagged["b"].Manager; m != "lifecycle-manager" {
			t.Fatalf("flag names manager %q", m)
		}
		if _, ok := f.rec.flagged["a"]; ok {
			t.Fatal("a flagged too")
		}
		f.report["b"] = contract.HealthReport{}
		f.clearedWithin(t, "b", 40*time.Second)
	}
	// Transport failures reported by a runtime that is heard are stale.
	f.report["b"] = contract.HealthReport{Managers: []contract.ManagerDelivery{{Name: "m", Result: "transport", FailingSeconds: 300}}}
	f.run(t, time.Minute)
	if len(f.rec.flagged) != 0 {
		t.Fatalf("flagged for a stale transport failure: %v", f.rec.flagged)
	}
	// A short failure (a listener's rolling update) is no flag.
	f.report["b"] = contract.HealthReport{Managers: []contract.ManagerDelivery{{Name: "m", Result: "5xx", FailingSeconds: 20}}}
	f.run(t, 25*time.Second)
	f.report["b"] = contract.HealthReport{}
	f.run(t, 2*time.Minute)
	if len(f.rec.flagged) != 0 {
		t.Fatalf("flagged after a short failure: %v", f.rec.flagged)
	}
}

func TestRemovedRuntimeForgotten(t *testing.T) {
	f := newFixture(t, "a", "b")
	f.run(t, time.Minute)
	f.ids = []string{"a"}
	f.run(t, 20*time.Second)
	if _, _, ok := f.tracker.Last("b"); ok {
		t.Fatal("tracker still holds a removed runtime")
	}
	if len(f.ev.states) != 1 {
		t.Fatalf("%d states, want 1", len(f.ev.states))
	}
}
