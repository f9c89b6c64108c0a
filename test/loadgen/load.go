// Package loadgen is the one load harness of the project's benchmarks
// (`make bench`, `make bench-compare` and the fleet benchmarks): the load
// loops (closed: N senders, each sending its next request when the last is
// answered; open: requests offered at a fixed rate, whether or not the
// earlier ones are answered), the interleaving of servers in chunks with each
// server's own CPU clock read around its chunks (docs/architecture.md §3.14),
// the ceilings (an always-allow ext_authz server, bare net/http), server
// processes re-executed from the benchmark's own binary, the clients
// (ext_authz Checks as Envoy sends them, events as senders post them),
// percentiles, and the performance goals, each defined once (goals.go).
package loadgen

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Do sends request i of a run and checks its answer.
type Do func(i int) error

// Closed sends n requests from conc senders, each sending its next request
// when its last one is answered (the load adapts to the server: saturation).
// It returns every request's latency, indexed like the requests; the first
// failed request fails the run.
func Closed(n, conc int, do Do) ([]time.Duration, error) {
	if n < 0 || conc < 1 {
		return nil, fmt.Errorf("loadgen: %d requests from %d senders", n, conc)
	}
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var failed failure
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for !failed.set() {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				lat[i] = timed(do, i, &failed)
			}
		})
	}
	wg.Wait()
	return lat, failed.err()
}

// Open offers n requests at rate per second on a fixed schedule (request i
// is due at i/rate after the start), each sent when due whether or not the
// earlier ones are answered, with at most maxInFlight unanswered (past that,
// sending waits and catches up with the schedule). A request's latency runs
// from its send. The sender sleeps between due requests and sends all that
// are due when it wakes: the timer's resolution (up to about 1 ms when the
// process is otherwise idle) makes small bursts, the same for every server.
func Open(n int, rate float64, maxInFlight int, do Do) ([]time.Duration, error) {
	if n < 0 || rate <= 0 || maxInFlight < 1 {
		return nil, fmt.Errorf("loadgen: %d requests at %g/s, at most %d in flight", n, rate, maxInFlight)
	}
	lat := make([]time.Duration, n)
	slots := make(chan struct{}, maxInFlight)
	var failed failure
	var wg sync.WaitGroup
	start := time.Now()
	for i := 0; i < n && !failed.set(); i++ {
		due := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if wait := time.Until(due); wait > 0 {
			time.Sleep(wait)
		}
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			lat[i] = timed(do, i, &failed)
		})
	}
	wg.Wait()
	return lat, failed.err()
}

// timed sends request i and returns its latency; a failure is kept.
func timed(do Do, i int, failed *failure) time.Duration {
	t0 := time.Now()
	err := do(i)
	d := time.Since(t0)
	if err != nil {
		failed.store(fmt.Errorf("request %d: %w", i, err))
	}
	return d
}

// failure keeps the first error of a run.
type failure struct {
	first atomic.Pointer[error]
}

func (f *failure) store(err error) { f.first.CompareAndSwap(nil, &err) }
func (f *failure) set() bool       { return f.first.Load() != nil }
func (f *failure) err() error {
	if p := f.first.Load(); p != nil {
		return *p
	}
	return nil
}

// Target is one server of a comparison.
type Target struct {
	Name string
	// CPU reads the server process's CPU clock (user + system time of all
	// its threads); nil when the server's CPU is not measured.
	CPU func() (time.Duration, error)
}

// Sample is what one server answered in a series of chunks.
type Sample struct {
	Latencies []time.Duration // every request's
	Wall      time.Duration   // sum of its chunks' wall-clock times
	CPU       time.Duration   // sum of its CPU clock's advance over its chunks
	HasCPU    bool
}

// Requests is the number of requests answered.
func (s *Sample) Requests() int { return len(s.Latencies) }

// RPS is requests per second of wall clock while it was loaded.
func (s *Sample) RPS() float64 {
	if s.Wall <= 0 {
		return 0
	}
	return float64(len(s.Latencies)) / s.Wall.Seconds()
}

// CPUPerRequest is the server's CPU time per request answered.
func (s *Sample) CPUPerRequest() time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	return s.CPU / time.Duration(len(s.Latencies))
}

// Summary of the latencies (sorted in place).
func (s *Sample) Summary() Summary { return Summarize(s.Latencies, s.Wall) }

// Interleave runs rounds rounds; in each, every target in turn gets one
// chunk (chunk(target, round) sends it, e.g. with Closed or Open), so all
// targets share the same machine state. The order rotates by one target a
// round, so no target is always first. The target's CPU clock is read just
// before and just after its chunk: its CPU figure covers exactly the
// requests it answered.
func Interleave(targets []Target, rounds int, chunk func(target, round int) ([]time.Duration, error)) ([]Sample, error) {
	samples := make([]Sample, len(targets))
	for round := range rounds {
		for k := range targets {
			t := (round + k) % len(targets)
			target := targets[t]
			var cpu0 time.Duration
			var err error
			if target.CPU != nil {
				if cpu0, err = target.CPU(); err != nil {
					return nil, fmt.Errorf("%s: CPU clock: %w", target.Name, err)
				}
			}
			t0 := time.Now()
			lat, err := chunk(t, round)
			wall := time.Since(t0)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", target.Name, err)
			}
			s := &samples[t]
			if target.CPU != nil {
				cpu1, err := target.CPU()
				if err != nil {
					return nil, fmt.Errorf("%s: CPU clock: %w", target.Name, err)
				}
				s.CPU += cpu1 - cpu0
				s.HasCPU = true
			}
			s.Wall += wall
			s.Latencies = append(s.Latencies, lat...)
		}
	}
	return samples, nil
}
