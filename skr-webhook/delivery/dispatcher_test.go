package delivery

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// scripted is a Sender whose answers a test chooses.
type scripted struct {
	mu      sync.Mutex
	answer  func(n int, ev contract.WatchEvent) Result // n: attempts so far for this object, from 1
	calls   map[string]int
	total   atomic.Int64
	release chan struct{} // when set, Send blocks until closed or ctx ends (object events)
	// control answers resyncs and heartbeats (n: control events so far,
	// from 1); 200 when nil.
	control  func(n int, ev contract.WatchEvent) Result
	controls []contract.WatchEvent
}

func (s *scripted) controlEvents() []contract.WatchEvent {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]contract.WatchEvent(nil), s.controls...)
}

func (s *scripted) Send(ctx context.Context, manager string, ev contract.WatchEvent) Result {
	if ev.IsControl() { // resyncs and heartbeats: recorded, answered by control or 200
		s.mu.Lock()
		s.controls = append(s.controls, ev)
		n := len(s.controls)
		s.mu.Unlock()
		if s.control != nil {
			return s.control(n, ev)
		}
		return Result{Outcome: Delivered, Status: http.StatusOK}
	}
	if s.release != nil {
		select {
		case <-s.release:
		case <-ctx.Done():
			return Result{Outcome: Retriable, Err: ctx.Err()}
		}
	}
	s.mu.Lock()
	if s.calls == nil {
		s.calls = map[string]int{}
	}
	s.calls[ev.Watched.Name]++
	n := s.calls[ev.Watched.Name]
	s.mu.Unlock()
	s.total.Add(1)
	return s.answer(n, ev)
}

func (s *scripted) count(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[name]
}

func watch(name string) contract.WatchEvent { return key(name).Event() }

// metric reads one counter or gauge (labels as name=value pairs) from reg.
// The dispatcher exports every series it has from the start (zeros
// included), so a name or label reg does not gather fails the test: a
// misspelt one cannot pass as "nothing happened".
func metric(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				if !hasLabel(m, labels[i], labels[i+1]) {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.Counter.GetValue()
			case m.Gauge != nil:
				return m.Gauge.GetValue()
			case m.Histogram != nil:
				return float64(m.Histogram.GetSampleCount())
			}
		}
		t.Fatalf("metric %s: no series with labels %v", name, labels)
	}
	t.Fatalf("metric %s: reg gathers no family of that name", name)
	return 0
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

// eventually waits (Gomega's Eventually, up to 10 s) until cond holds.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	gomega.NewWithT(t).Eventually(cond).WithTimeout(10*time.Second).WithPolling(5*time.Millisecond).
		Should(gomega.BeTrue(), what)
}

// inFlight is the number of deliveries workers hold.
func inFlight(q *Queue) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.flight
}

func fastConfig(reg prometheus.Registerer) Config {
	return Config{
		QueueSize: 100, Workers: 4, BaseDelay: time.Millisecond, MaxDelay: 5 * time.Millisecond,
		AttemptTimeout: time.Second, ObjectInterval: -1, Registerer: reg,
	}
}

func TestDispatcherRetriesFailuresUntilDelivered(t *testing.T) {
	for _, fail := range []Result{
		{Outcome: Retriable, Err: errors.New("connection refused")},
		{Outcome: Retriable, Status: http.StatusServiceUnavailable},
		{Outcome: Retriable, Status: http.StatusTooManyRequests},
	} {
		t.Run(fmt.Sprintf("%d %v", fail.Status, fail.Err), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			s := &scripted{answer: func(n int, _ contract.WatchEvent) Result {
				if n <= 3 {
					return fail
				}
				return Result{Outcome: Delivered, Status: 200}
			}}
			d := New(fastConfig(reg), s, logr.Discard())
			d.Start()
			d.Enqueue("lifecycle-manager", watch("a"))
			eventually(t, "delivery", func() bool { return metric(t, reg, "runtime_watcher_skr_webhook_events_delivered_total") == 1 })
			if err := d.Shutdown(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := s.count("a"); got != 4 {
				t.Errorf("%d attempts, want 4", got)
			}
			if got := metric(t, reg, "runtime_watcher_skr_webhook_event_retries_total"); got != 3 {
				t.Errorf("retries %v, want 3", got)
			}
			if got := metric(t, reg, "runtime_watcher_skr_webhook_delivery_latency_seconds"); got != 1 {
				t.Errorf("latency samples %v, want 1", got)
			}
		})
	}
}

func TestDispatcherDropsRejectedEvents(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &scripted{answer: func(int, contract.WatchEvent) Result {
		return Result{Outcome: Rejected, Status: http.StatusBadRequest, Err: errors.New("400")}
	}}
	d := New(fastConfig(reg), s, logr.Discard())
	d.Start()
	d.Enqueue("m", watch("a"))
	eventually(t, "drop", func() bool {
		return metric(t, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropBadRequest) == 1
	})
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.count("a") != 1 || metric(t, reg, "runtime_watcher_skr_webhook_event_retries_total") != 0 {
		t.Fatalf("rejected event retried: %d attempts", s.count("a"))
	}
}

func TestDispatcherExpiresAfterMaxRetryAge(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &scripted{answer: func(int, contract.WatchEvent) Result {
		return Result{Outcome: Retriable, Err: errors.New("down")}
	}}
	cfg := fastConfig(reg)
	cfg.MaxRetryAge = 50 * time.Millisecond
	d := New(cfg, s, logr.Discard())
	d.Start()
	d.Enqueue("m", watch("a"))
	eventually(t, "expiry", func() bool {
		return metric(t, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropExpired) == 1
	})
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s.count("a") < 2 {
		t.Fatalf("only %d attempts before expiry", s.count("a"))
	}
}

func TestDispatcherEnqueueNeverBlocks(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &scripted{release: make(chan struct{}), answer: func(int, contract.WatchEvent) Result {
		return Result{Outcome: Delivered}
	}}
	cfg := fastConfig(reg)           // 4 workers, 100 slots
	cfg.AttemptTimeout = time.Minute // the workers stay stuck until released
	d := New(cfg, s, logr.Discard())
	d.Start()
	// Every worker is stuck in Send; enqueueing 10,000 objects still
	// returns, dropping the oldest.
	for i := 0; i < 4; i++ {
		d.Enqueue("m", watch(fmt.Sprint(i)))
	}
	eventually(t, "every worker in Send", func() bool { return inFlight(d.queue) == 4 })
	for i := 4; i < 10000; i++ {
		d.Enqueue("m", watch(fmt.Sprint(i)))
	}
	// 100 objects and the overflow resync wait for a worker.
	eventually(t, "workers busy", func() bool { return d.Depth() == 101 })
	dropped := metric(t, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropOverflow)
	if dropped != 10000-100-4 {
		t.Fatalf("dropped %v, want %d", dropped, 10000-100-4)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_queue_depth"); got != 101 {
		t.Fatalf("queue depth gauge %v", got)
	}
	close(s.release)
	eventually(t, "drain", func() bool { return metric(t, reg, "runtime_watcher_skr_webhook_events_delivered_total") == 104 })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if c := s.controlEvents(); len(c) == 0 || c[len(c)-1].Resync != contract.ResyncOverflow {
		t.Fatalf("control events %+v: want an overflow resync last", c)
	}
	// The newest 100 objects survived; the others were in flight or dropped.
	for i := 9900; i < 10000; i++ {
		if n := s.count(fmt.Sprint(i)); n != 1 {
			t.Fatalf("object %d delivered %d times, want 1", i, n)
		}
	}
}

func TestDispatcherCoalescesAndRedeliversChangesInFlight(t *testing.T) {
	reg := prometheus.NewRegistry()
	gate := make(chan struct{})
	first := make(chan struct{})
	var once sync.Once
	s := &scripted{answer: func(n int, _ contract.WatchEvent) Result {
		if n == 1 {
			once.Do(func() { close(first) })
			<-gate
		}
		return Result{Outcome: Delivered}
	}}
	d := New(fastConfig(reg), s, logr.Discard())
	d.Start()
	d.Enqueue("m", watch("a"))
	<-first // the first delivery is in flight
	for i := 0; i < 500; i++ {
		d.Enqueue("m", watch("a"))
	}
	close(gate)
	eventually(t, "second delivery", func() bool { return s.count("a") == 2 })
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.count("a"); got != 2 {
		t.Fatalf("%d deliveries, want 2 (one in flight, one for the changes meanwhile)", got)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_events_coalesced_total"); got != 500 {
		t.Fatalf("coalesced %v, want 500", got)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_events_accepted_total"); got != 501 {
		t.Fatalf("accepted %v, want 501", got)
	}
}

func TestDispatcherShutdownDrainsPending(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &scripted{answer: func(int, contract.WatchEvent) Result { return Result{Outcome: Delivered} }}
	d := New(fastConfig(reg), s, logr.Discard())
	for i := 0; i < 50; i++ { // enqueued before the workers run
		d.Enqueue("m", watch(fmt.Sprint(i)))
	}
	if err := d.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := s.total.Load(); got != 50 {
		t.Fatalf("%d delivered during drain, want 50", got)
	}
	d.Enqueue("m", watch("late"))
	if got := metric(t, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropShutdown); got != 1 {
		t.Fatalf("event after shutdown: dropped %v, want 1", got)
	}
}

func TestDispatcherShutdownIsBounded(t *testing.T) {
	reg := prometheus.NewRegistry()
	s := &scripted{release: make(chan struct{}), answer: func(int, contract.WatchEvent) Result {
		return Result{Outcome: Delivered}
	}}
	cfg := fastConfig(reg)
	cfg.AttemptTimeout = time.Hour // only the drain deadline ends the attempts
	d := New(cfg, s, logr.Discard())
	d.Start()
	for i := 0; i < 20; i++ {
		d.Enqueue("m", watch(fmt.Sprint(i)))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := d.Shutdown(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("shutdown: %v, want deadline exceeded", err)
	}
	if got := metric(t, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropShutdown); got != 20 {
		t.Fatalf("dropped at shutdown %v, want 20", got)
	}
}

func TestBackoff(t *testing.T) {
	d := New(Config{BaseDelay: 100 * time.Millisecond, MaxDelay: 10 * time.Second}, nil, logr.Discard())
	tests := []struct {
		attempt    int
		retryAfter time.Duration
		lo, hi     time.Duration
	}{
		{1, 0, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 0, 100 * time.Millisecond, 200 * time.Millisecond},
		{5, 0, 800 * time.Millisecond, 1600 * time.Millisecond},
		{8, 0, 5 * time.Second, 10 * time.Second},
		{40, 0, 5 * time.Second, 10 * time.Second},
		{1, 3 * time.Second, 3 * time.Second, 3 * time.Second},
		{1, time.Hour, 10 * time.Second, 10 * time.Second},
	}
	for _, tt := range tests {
		for i := 0; i < 100; i++ {
			if got := d.backoff(tt.attempt, tt.retryAfter); got < tt.lo || got > tt.hi {
				t.Fatalf("backoff(%d, %v) = %v, want in [%v, %v]", tt.attempt, tt.retryAfter, got, tt.lo, tt.hi)
			}
		}
	}
}
