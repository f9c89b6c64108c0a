package loadgen_test

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

func TestMain(m *testing.M) {
	loadgen.ServeIfChild(nil)
	os.Exit(m.Run())
}

func TestPercentileAndSummary(t *testing.T) {
	var lat []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		lat = append(lat, time.Duration(i)*time.Microsecond)
	}
	s := loadgen.Summarize(lat, time.Second)
	if s.N != 100 || s.RPS != 100 || s.P50 != 51*time.Microsecond || s.P99 != 99*time.Microsecond || s.Max != 100*time.Microsecond {
		t.Fatalf("summary %+v", s)
	}
	if got := loadgen.Percentile(nil, 0.5); got != 0 {
		t.Fatalf("percentile of nothing: %v", got)
	}
	if got := loadgen.Median([]float64{3, 1, 2, 10}); got != 2.5 {
		t.Fatalf("median %v", got)
	}
}

func TestClosedSendsEveryRequestOnceAndFailsOnAnError(t *testing.T) {
	var seen [1000]atomic.Int32
	var inFlight, most atomic.Int32
	lat, err := loadgen.Closed(len(seen), 8, func(i int) error {
		n := inFlight.Add(1)
		for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
		}
		seen[i].Add(1)
		inFlight.Add(-1)
		return nil
	})
	if err != nil || len(lat) != len(seen) {
		t.Fatalf("%d latencies, %v", len(lat), err)
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("request %d sent %d times", i, seen[i].Load())
		}
	}
	if most.Load() > 8 {
		t.Fatalf("%d requests in flight from 8 senders", most.Load())
	}
	boom := errors.New("boom")
	if _, err := loadgen.Closed(100, 4, func(i int) error {
		if i == 42 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed request did not fail the run: %v", err)
	}
}

// An open loop sends due requests without waiting for earlier answers: the
// first five requests are only answered once all five were sent.
func TestOpenDoesNotWaitForAnswers(t *testing.T) {
	var started sync.WaitGroup
	started.Add(5)
	var sent atomic.Int32
	lat, err := loadgen.Open(20, 1e6, 5, func(i int) error {
		sent.Add(1)
		if i < 5 {
			started.Done()
			started.Wait()
		}
		return nil
	})
	if err != nil || len(lat) != 20 || sent.Load() != 20 {
		t.Fatalf("%d latencies, %d sent, %v", len(lat), sent.Load(), err)
	}
	boom := errors.New("boom")
	if _, err := loadgen.Open(50, 1e6, 4, func(i int) error {
		if i == 7 {
			return boom
		}
		return nil
	}); !errors.Is(err, boom) {
		t.Fatalf("a failed request did not fail the run: %v", err)
	}
}

func TestInterleaveRotatesAndReadsEachClockAroundItsChunks(t *testing.T) {
	var order []string
	clocks := []time.Duration{0, 0}
	targets := []loadgen.Target{
		{Name: "a", CPU: func() (time.Duration, error) { return clocks[0], nil }},
		{Name: "b", CPU: func() (time.Duration, error) { return clocks[1], nil }},
		{Name: "c"},
	}
	samples, err := loadgen.Interleave(targets, 2, func(target, round int) ([]time.Duration, error) {
		order = append(order, fmt.Sprintf("%s%d", targets[target].Name, round))
		if target < 2 {
			clocks[target] += time.Duration(target+1) * time.Millisecond // this chunk's CPU
		}
		clocks[0] += time.Hour // between chunks of another target: not counted
		return make([]time.Duration, 10), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(order) != "[a0 b0 c0 b1 c1 a1]" {
		t.Fatalf("order %v", order)
	}
	// a's clock also moved by an hour in each of a's own chunks.
	if samples[0].CPU != 2*time.Hour+2*time.Millisecond || samples[1].CPU != 4*time.Millisecond || samples[2].HasCPU {
		t.Fatalf("CPU %v %v %v", samples[0].CPU, samples[1].CPU, samples[2].HasCPU)
	}
	if samples[1].Requests() != 20 || samples[1].CPUPerRequest() != 200*time.Microsecond {
		t.Fatalf("b: %d requests, %v per request", samples[1].Requests(), samples[1].CPUPerRequest())
	}
}

// ProcessCPU of this process agrees with getrusage(RUSAGE_SELF) read
// around it.
func TestProcessCPUIsTheProcessCPUTime(t *testing.T) {
	rusage := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			t.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	before := rusage()
	cpu, err := loadgen.ProcessCPU(os.Getpid())
	after := rusage()
	if err != nil {
		t.Fatal(err)
	}
	// getrusage reports microseconds; allow a millisecond either way.
	if cpu < before-time.Millisecond || cpu > after+time.Millisecond {
		t.Fatalf("process CPU clock %v, getrusage %v .. %v", cpu, before, after)
	}
	raw, err := os.ReadFile("/proc/sys/kernel/pid_max")
	if err != nil {
		t.Fatal(err)
	}
	pidMax, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := loadgen.ProcessCPU(pidMax); err == nil { // pids are below pid_max
		t.Fatal("the CPU clock of a process that does not exist was read")
	}
}

// The ceilings run as processes of their own, and their CPU clocks move
// with the requests they answer.
func TestChildCeilings(t *testing.T) {
	allow, err := loadgen.StartChild(loadgen.KindAlwaysAllow, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = allow.Stop() }()
	checker, err := loadgen.DialChecker(allow.Addr, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer checker.Close()
	req := extauthz.CheckRequest("m", nil)
	bare, err := loadgen.StartChild(loadgen.KindBareHTTP, "")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = bare.Stop() }()
	hdr := http.Header{contract.HeaderRuntimeID: {"runtime-a"}, contract.HeaderXFCC: {"Hash=00"}}
	poster := loadgen.NewPoster("http://"+bare.Addr+contract.EventPath("m"), hdr, []byte(loadgen.WatchEvent), 4)
	defer poster.Close()

	targets := []loadgen.Target{{Name: "allow", CPU: allow.CPU}, {Name: "bare", CPU: bare.CPU}}
	samples, err := loadgen.Interleave(targets, 2, func(target, _ int) ([]time.Duration, error) {
		if target == 0 {
			return loadgen.Closed(50, 4, func(int) error { return checker.Check(req, "") })
		}
		return loadgen.Open(50, 5000, 16, func(int) error { return poster.Post() })
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range samples {
		if s.Requests() != 100 || s.CPU <= 0 || s.RPS() <= 0 {
			t.Fatalf("%s: %d requests, CPU %v, %.0f/s", targets[i].Name, s.Requests(), s.CPU, s.RPS())
		}
	}
	if err := checker.Check(req, "runtime-b"); err == nil {
		t.Fatal("an allow for another runtime passed the check")
	}
	if _, err := loadgen.StartChild("no-such-kind", ""); err == nil {
		t.Fatal("a child of an unknown kind started")
	}
}

func TestGoals(t *testing.T) {
	for _, c := range []struct {
		g    loadgen.Goal
		text string
		v    float64
		met  bool
	}{
		{loadgen.ExtAuthzCPUClosed, "≤ 1.10×", 1.10, true},
		{loadgen.ExtAuthzCPUOpen, "≤ 1.03×", 1.031, false},
		{loadgen.ExtAuthzAddedP50, "≤ 30 µs", 29, true},
		{loadgen.ListenerEventsPerSecond, "≥ 10,000 events/s", 9999, false},
		{loadgen.WebhookAdmissionP99, "≤ 5 ms", 5, true},
	} {
		if c.g.String() != c.text || c.g.Met(c.v) != c.met {
			t.Errorf("%s: %q, met(%v) = %v", c.g.What, c.g.String(), c.v, c.g.Met(c.v))
		}
	}
	if g, ok := loadgen.ExtAuthzMemory(100000); !ok || g.String() != "≤ 192 MiB" {
		t.Errorf("100,000 runtimes: %v %v", g, ok)
	}
	if g, _ := loadgen.ExtAuthzMemory(10000); g.String() != "≤ 64 MiB" {
		t.Errorf("10,000 runtimes: %v", g)
	}
}
