package health

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
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
	// managers whose webhooks every runtime's SKR carries.
	managers map[string]bool
	opts     Options
}

func newFixture(t *testing.T, ids ...string) *fixture {
	t.Helper()
	f := &fixture{clock: clocktesting.NewFakeClock(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)), prober: newFakeProber(),
		rec: &recorder{}, ids: ids, quiet: map[string]bool{}, report: map[string]contract.HealthReport{},
		managers: map[string]bool{"lifecycle-manager": true, "m": true}}
	f.tracker = NewTracker(f.clock, 1000)
	f.restart()
	return f
}

// restart is a vs-controller restart: everything in memory is gone.
func (f *fixture) restart() {
	f.tracker = NewTracker(f.clock, 1000)
	o := f.opts
	o.Clock = f.clock
	f.ev = NewEvaluator(o, f.tracker, f.runtimes, f.prober, f.rec, logr.Discard())
}

func (f *fixture) runtimes(context.Context) ([]Runtime, error) {
	out := make([]Runtime, 0, len(f.ids))
	for _, id := range f.ids {
		out = append(out, Runtime{ID: id, Kyma: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: id}}, Managers: f.managers})
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
	// Three faults in a row, two of one cause: undamped here (a window
	// shorter than a round); TestFlappingIsDamped damps.
	f.opts.EventWindow = time.Second
	f.restart()
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

// Issue 40: a runtime's report named any manager — one its SKR has no
// webhook of, another team's — and got it flagged. A report speaks only for
// the managers of the webhooks its runtime's SKR carries.
func TestReportSpeaksOnlyForItsRuntimesManagers(t *testing.T) {
	f := newFixture(t, "a", "b")
	f.run(t, 3*time.Minute)
	before := testutil.ToFloat64(managersIgnored)
	f.report["b"] = contract.HealthReport{Managers: []contract.ManagerDelivery{
		{Name: "other-teams-operator", Result: "404", FailingSeconds: 600},
		{Name: "no-such-manager", Result: "5xx", FailingSeconds: 500},
	}}
	f.run(t, 3*time.Minute)
	if len(f.rec.changes) != 0 || len(f.rec.flagged) != 0 {
		t.Fatalf("a report naming managers b's SKR does not carry flagged it: changes %v, flagged %v", f.rec.changes, f.rec.flagged)
	}
	// b reports every 30 s: six reports, two foreign managers each, counted
	// once per report however many rounds read it.
	if got := testutil.ToFloat64(managersIgnored) - before; got != 12 {
		t.Fatalf("%v ignored managers counted, want 12 (6 reports × 2)", got)
	}
	// The same report naming a manager b's SKR carries is heeded.
	f.report["b"] = contract.HealthReport{Managers: []contract.ManagerDelivery{
		{Name: "other-teams-operator", Result: "404", FailingSeconds: 600},
		{Name: "m", Result: "404", FailingSeconds: 300},
	}}
	f.flaggedWithin(t, "b", CauseNoRoute, time.Minute)
	if m := f.rec.flagged["b"].Manager; m != "m" {
		t.Fatalf("flag names manager %q, want m", m)
	}
}

// Issue 40: a report flipping every round made an Event, a Watcher status
// write and a resync answer each time. Each change of cause is told at most
// once per window; what holds when the window ends is told then.
func TestFlappingIsDamped(t *testing.T) {
	f := newFixture(t, "a", "b")
	f.run(t, 3*time.Minute)
	const window = 5 * time.Minute
	f.opts.EventWindow = window
	f.restart()
	f.run(t, 3*time.Minute) // heard again after the restart
	f.rec.changes = nil
	broken := contract.HealthReport{Managers: []contract.ManagerDelivery{{Name: "m", Result: "404", FailingSeconds: 600}}}
	toldBefore, dampedBefore := testutil.ToFloat64(changesTold.WithLabelValues("told")), testutil.ToFloat64(changesTold.WithLabelValues("damped"))
	var resyncs, statusChanges int
	wasFlagged := false
	// a reports before every round, broken and healthy in turn, for 28
	// minutes: 170 rounds, 170 evaluated changes.
	const rounds = 170
	for k := range rounds {
		rep := contract.HealthReport{}
		if k%2 == 0 {
			rep = broken
		}
		for range 10 {
			f.clock.Step(time.Second)
			if f.clock.Now().Unix()%30 == 0 {
				f.tracker.Observe("b", contract.HealthReport{})
			}
		}
		if _, resync := f.tracker.Observe("a", rep); resync {
			resyncs++
		}
		if err := f.ev.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, flagged := f.rec.flagged["a"]; flagged != wasFlagged {
			statusChanges++
			wasFlagged = flagged
		}
	}
	// Told: broken at rounds 0, 30, ..., 150 and recovered at 1, 31, ...,
	// 151 — once per change of cause per 5 minutes (30 rounds).
	var brokenTold, recoveredTold int
	for _, c := range f.rec.changes {
		switch c {
		case "a=" + string(CauseNoRoute):
			brokenTold++
		case "a=":
			recoveredTold++
		default:
			t.Fatalf("unexpected change %q", c)
		}
	}
	if brokenTold != 6 || recoveredTold != 6 {
		t.Fatalf("told %d broken and %d recovered over 28 min of flapping, want 6 and 6 (one per change of cause per 5 min)", brokenTold, recoveredTold)
	}
	if statusChanges != 12 {
		t.Fatalf("the Watchers' flagged set changed %d times, want 12", statusChanges)
	}
	// One resync answer per told recovery (with the next report).
	if resyncs != 6 {
		t.Fatalf("%d resync answers, want 6", resyncs)
	}
	if told := testutil.ToFloat64(changesTold.WithLabelValues("told")) - toldBefore; told != 12 {
		t.Fatalf("changes told metric %v, want 12", told)
	}
	// Of the other 158 evaluated changes, every other one moved away from
	// the told flag (held back); the next one came back to it.
	if damped := testutil.ToFloat64(changesTold.WithLabelValues("damped")) - dampedBefore; damped != (rounds-12)/2 {
		t.Fatalf("changes damped metric %v, want %d", damped, (rounds-12)/2)
	}

	// The flapping stops broken (round 170 on), while the last told break
	// (round 150) is within the window: held, then told at round 180, not
	// lost.
	for k := rounds; k <= 180; k++ {
		f.clock.Step(10 * time.Second)
		f.tracker.Observe("a", broken)
		f.tracker.Observe("b", contract.HealthReport{})
		if err := f.ev.Round(context.Background()); err != nil {
			t.Fatal(err)
		}
		if _, flagged := f.rec.flagged["a"]; flagged != (k == 180) {
			t.Fatalf("round %d: a told flagged %v, want only from round 180 (flagged %v)", k, flagged, f.rec.flagged)
		}
	}
	if got := f.rec.flagged["a"]; got.Cause != CauseNoRoute || got.Manager != "m" {
		t.Fatalf("a steady break after flapping told as %+v", got)
	}
}
