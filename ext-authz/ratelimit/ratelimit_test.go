package ratelimit_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
)

var t0 = time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)

func newLimiter(t testing.TB, c ratelimit.Config) *ratelimit.Limiter {
	t.Helper()
	if c.Mode == "" {
		c.Mode = ratelimit.ModeEnforce
	}
	l, err := ratelimit.New(c)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// The burst goes at once, then one request per 1/rate; a refusal says how
// long until the next token and takes none.
func TestBurstThenRate(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{Default: ratelimit.Limit{Rate: 10, Burst: 5}})
	for i := range 5 {
		if ok, _ := l.Allow("a", "", t0); !ok {
			t.Fatalf("request %d of the burst refused", i+1)
		}
	}
	ok, wait := l.Allow("a", "", t0)
	if ok || wait != 100*time.Millisecond {
		t.Fatalf("6th at once = %v, %v; want refused, 100ms", ok, wait)
	}
	if ok, wait := l.Allow("a", "", t0.Add(50*time.Millisecond)); ok || wait != 50*time.Millisecond {
		t.Fatalf("after 50ms = %v, %v; want refused, 50ms (refusals take no token)", ok, wait)
	}
	if ok, _ := l.Allow("a", "", t0.Add(100*time.Millisecond)); !ok {
		t.Fatal("after 100ms: refused, want the new token")
	}
	if ok, _ := l.Allow("a", "", t0.Add(100*time.Millisecond)); ok {
		t.Fatal("a second request on one new token allowed")
	}
	// Another runtime has its own bucket.
	if ok, _ := l.Allow("b", "", t0); !ok {
		t.Fatal("runtime b refused: buckets are per runtime")
	}
	// A long pause refills up to the burst, not beyond.
	later := t0.Add(time.Hour)
	for i := range 5 {
		if ok, _ := l.Allow("a", "", later); !ok {
			t.Fatalf("after an hour, request %d refused", i+1)
		}
	}
	if ok, _ := l.Allow("a", "", later); ok {
		t.Fatal("after an hour the bucket held more than its burst")
	}
}

// A runtime of a class with a limit gets it; any other class, or none,
// gets the default.
func TestClasses(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{
		Default: ratelimit.Limit{Rate: 1, Burst: 4},
		Classes: map[string]ratelimit.Limit{"trial": {Rate: 1, Burst: 1}, "big": {Rate: 1, Burst: 10}},
	})
	count := func(runtime, class string) int {
		n := 0
		for range 20 {
			if ok, _ := l.Allow(runtime, class, t0); ok {
				n++
			}
		}
		return n
	}
	for _, tc := range []struct {
		runtime, class string
		want           int
	}{{"r1", "trial", 1}, {"r2", "big", 10}, {"r3", "", 4}, {"r4", "unknown", 4}} {
		if got := count(tc.runtime, tc.class); got != tc.want {
			t.Errorf("class %q: %d allowed at once, want %d", tc.class, got, tc.want)
		}
	}
}

// Idle buckets (full again) are removed by Sweep; busy ones stay.
func TestSweep(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{Default: ratelimit.Limit{Rate: 1, Burst: 10}})
	for i := range 100 {
		l.Allow(fmt.Sprint("idle-", i), "", t0)
	}
	for range 10 {
		l.Allow("busy", "", t0.Add(time.Second))
	}
	if l.Len() != 101 {
		t.Fatalf("Len = %d, want 101", l.Len())
	}
	l.Sweep(t0.Add(1500 * time.Millisecond)) // idle ones are full 1s after their one request
	if l.Len() != 1 {
		t.Fatalf("after Sweep Len = %d, want 1 (busy)", l.Len())
	}
	if ok, _ := l.Allow("busy", "", t0.Add(1500*time.Millisecond)); ok {
		t.Fatal("the busy runtime's bucket was reset by Sweep")
	}
}

// However many runtimes come, the buckets stay within MaxRuntimes: idle
// ones go first, then any (counted).
func TestBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	l := newLimiter(t, ratelimit.Config{Default: ratelimit.Limit{Rate: 1, Burst: 2}, MaxRuntimes: 640, Registerer: reg})
	for i := range 10_000 {
		l.Allow(fmt.Sprint("r-", i), "", t0) // all busy: nothing is idle at t0
	}
	if l.Len() > 640 {
		t.Fatalf("Len = %d, want at most 640", l.Len())
	}
	ev := testutil.ToFloat64(l.EvictionsCounter())
	if ev < 10_000-640 {
		t.Errorf("evictions %v, want at least %d", ev, 10_000-640)
	}
	// Later, idle buckets make room without evictions (20 new runtimes:
	// far fewer than the 10 buckets of each of the 64 shards).
	for i := range 20 {
		l.Allow(fmt.Sprint("s-", i), "", t0.Add(time.Hour))
	}
	if got := testutil.ToFloat64(l.EvictionsCounter()); got != ev {
		t.Errorf("evictions grew from %v to %v though every old bucket was idle", ev, got)
	}
	if got, err := testutil.GatherAndCount(reg, "runtime_watcher_ext_authz_rate_limit_buckets", "runtime_watcher_ext_authz_rate_limit_evictions_total"); err != nil || got != 2 {
		t.Errorf("metrics: %d series, %v; want 2 without a runtime label", got, err)
	}
}

// The report names the runtimes most often over their limit, most first,
// at most TopOffenders, sums the rest and starts a new period; its table
// is bounded.
func TestReport(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{Default: ratelimit.Limit{Rate: 0.001, Burst: 1}})
	for i := range 2000 { // runtime r-i is over its limit i%20 times
		r := fmt.Sprint("r-", i)
		for range i%20 + 1 {
			l.Allow(r, "", t0)
		}
	}
	top, others := l.Report()
	if len(top) != ratelimit.TopOffenders {
		t.Fatalf("%d named, want %d", len(top), ratelimit.TopOffenders)
	}
	for i, o := range top {
		if o.Over != 19 || i > 0 && top[i-1].Runtime > o.Runtime {
			t.Errorf("top[%d] = %+v, want 19 refusals, by name", i, o)
		}
	}
	total := uint64(0)
	for i := range 2000 {
		total += uint64(i % 20)
	}
	if sum := others + 19*ratelimit.TopOffenders; sum != total {
		t.Errorf("named + others = %d, want every refusal: %d", sum, total)
	}
	if top, others := l.Report(); len(top) != 0 || others != 0 {
		t.Errorf("second report %v, %d; want a new, empty period", top, others)
	}
}

// Run logs one line per interval naming the offenders, and sweeps.
func TestRun(t *testing.T) {
	l := newLimiter(t, ratelimit.Config{Default: ratelimit.Limit{Rate: 1, Burst: 1}})
	clk := clocktesting.NewFakeClock(time.Now())
	lines := make(chan string, 10)
	log := funcr.NewJSON(func(obj string) { lines <- obj }, funcr.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); l.Run(ctx, time.Minute, clk, log) }()
	defer wg.Wait()
	defer cancel()

	now := time.Now()
	for range 3 {
		l.Allow("flooder", "", now)
	}
	for !clk.HasWaiters() {
		runtime.Gosched()
	}
	clk.Step(time.Minute)
	select {
	case line := <-lines:
		for _, want := range []string{`"runtimes over their rate limit"`, `"runtimes":["flooder"]`, `"overLimit":[2]`, `"mode":"enforce"`} {
			if !strings.Contains(line, want) {
				t.Errorf("report line lacks %s: %s", want, line)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no report line after the interval")
	}
}

func TestNewRefusesBadLimits(t *testing.T) {
	for _, c := range []ratelimit.Config{
		{Default: ratelimit.Limit{Rate: 0, Burst: 1}},
		{Default: ratelimit.Limit{Rate: 1, Burst: 0}},
		{Default: ratelimit.Limit{Rate: 1, Burst: 1}, Classes: map[string]ratelimit.Limit{"x": {Rate: -1, Burst: 1}}},
	} {
		if _, err := ratelimit.New(c); err == nil {
			t.Errorf("New(%+v) accepted", c)
		}
	}
}
