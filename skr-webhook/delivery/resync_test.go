package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// fakeEnv is a dispatcher on a fake clock with jitter fixed at its maximum,
// so every retry delay is exactly BaseDelay·2^(attempt-1) (capped).
type fakeEnv struct {
	d     *Dispatcher
	reg   *prometheus.Registry
	clock *testingclock.FakeClock
	s     *timedSender
}

// timedSender answers with answer and records the fake time of each call.
type timedSender struct {
	clock  *testingclock.FakeClock
	mu     sync.Mutex
	answer func(n int, ev contract.WatchEvent) Result // n: calls so far, from 1
	calls  []call
}

type call struct {
	at      time.Time
	manager string
	ev      contract.WatchEvent
}

func (s *timedSender) Send(_ context.Context, manager string, ev contract.WatchEvent) Result {
	s.mu.Lock()
	s.calls = append(s.calls, call{s.clock.Now(), manager, ev})
	n := len(s.calls)
	s.mu.Unlock()
	return s.answer(n, ev)
}

func (s *timedSender) snapshot() []call {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]call(nil), s.calls...)
}

func (s *timedSender) n() int { return len(s.snapshot()) }

func newFakeEnv(t *testing.T, cfg Config, answer func(n int, ev contract.WatchEvent) Result) *fakeEnv {
	t.Helper()
	e := &fakeEnv{reg: prometheus.NewRegistry(), clock: testingclock.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))}
	e.s = &timedSender{clock: e.clock, answer: answer}
	cfg.Registerer, cfg.Clock = e.reg, e.clock
	cfg.Jitter = func(n time.Duration) time.Duration { return n }
	if cfg.Workers == 0 {
		cfg.Workers = 1
	}
	if cfg.ObjectInterval == 0 {
		cfg.ObjectInterval = -1
	}
	if cfg.BaseDelay == 0 {
		cfg.BaseDelay, cfg.MaxDelay = time.Second, 8*time.Second
	}
	e.d = New(cfg, e.s, logr.Discard())
	t.Cleanup(func() {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_ = e.d.Shutdown(ctx)
	})
	return e
}

// waitCalls waits until the sender has seen n calls and no delivery is in
// flight: the last attempt's outcome is counted and its retry, if any, is
// due on the fake clock (a step taken while it is still in flight would
// move the retry's due time past the step).
func (e *fakeEnv) waitCalls(t *testing.T, n int) {
	t.Helper()
	eventually(t, fmt.Sprintf("%d calls", n), func() bool { return e.s.n() >= n && inFlight(e.d.queue) == 0 })
	if got := e.s.n(); got != n {
		t.Fatalf("%d calls, want %d", got, n)
	}
}

// owed reports whether the queue owes n deliveries and has none in flight.
func (e *fakeEnv) owed(n int) func() bool {
	return func() bool {
		q := e.d.queue
		q.mu.Lock()
		defer q.mu.Unlock()
		return q.flight == 0 && q.depthLocked() == n
	}
}

func (e *fakeEnv) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	return metric(t, e.reg, "runtime_watcher_skr_webhook_"+name, labels...)
}

func status(code int) Result {
	r := Result{Status: code, Outcome: Retriable}
	switch {
	case code >= 200 && code < 300:
		r.Outcome = Delivered
	case BadBody(code):
		r.Outcome = Rejected
	}
	if r.Outcome != Delivered {
		r.Err = fmt.Errorf("kcp answered %d", code)
	}
	return r
}

// objects keeps the change events of a call list.
func objects(calls []call) []call {
	var out []call
	for _, c := range calls {
		if !c.ev.IsControl() {
			out = append(out, c)
		}
	}
	return out
}

// Every status the delivery rules name, and a transport error: 2xx
// delivered; 400, 413, 415, 422 dropped and counted by reason, never
// retried; everything else retried until delivered.
func TestAnswerClasses(t *testing.T) {
	for _, tt := range []struct {
		first  Result
		drop   string // drop reason, or "" when retried
		result string
	}{
		{status(200), "", "2xx"},
		{status(204), "", "2xx"},
		{status(400), DropBadRequest, "400"},
		{status(413), DropTooLarge, "413"},
		{status(415), DropUnsupportedMediaType, "415"},
		{status(422), DropUnprocessable, "422"},
		{status(301), "", "3xx"},
		{status(401), "", "4xx"},
		{status(403), "", "403"},
		{status(404), "", "404"},
		{status(408), "", "408"},
		{status(425), "", "425"},
		{status(429), "", "429"},
		{status(500), "", "5xx"},
		{status(503), "", "5xx"},
		{Result{Outcome: Retriable, Err: errors.New("connection refused")}, "", "transport"},
		{Result{Outcome: Rejected, Err: errors.New("invalid manager")}, DropInvalid, "invalid"},
	} {
		t.Run(tt.result+"/"+fmt.Sprint(tt.first.Status), func(t *testing.T) {
			e := newFakeEnv(t, Config{}, func(n int, ev contract.WatchEvent) Result {
				if ev.IsControl() {
					return status(200)
				}
				if n <= 2 { // the startup resync was call 1
					return tt.first
				}
				return status(200)
			})
			e.d.Enqueue("m", watch("a"))
			e.d.Start()
			e.waitCalls(t, 2)
			want := 1.0
			if tt.result == "2xx" {
				want = 2 // the startup resync too
			}
			if got := e.counter(t, "delivery_attempts_total", "result", tt.result); got != want {
				t.Errorf("attempts{result=%s} = %v, want %v", tt.result, got, want)
			}
			delivered := tt.first.Outcome == Delivered
			if tt.drop != "" {
				eventually(t, "drop counted", func() bool { return e.counter(t, "events_dropped_total", "reason", tt.drop) == 1 })
				e.clock.Step(time.Hour)
				if err := e.d.Drain(context.Background()); err != nil {
					t.Fatal(err)
				}
				if n := len(objects(e.s.snapshot())); n != 1 {
					t.Fatalf("%d attempts of a refused body, want 1", n)
				}
				if got := e.counter(t, "event_retries_total"); got != 0 {
					t.Fatalf("retries %v", got)
				}
				return
			}
			if !delivered {
				eventually(t, "retry scheduled", func() bool { return e.counter(t, "event_retries_total") == 1 })
				e.clock.Step(time.Second / 2) // the first delay: BaseDelay/2 + jitter (max) = 1s
				if e.counter(t, "events_delivered_total") != 0 {
					t.Fatal("retried before its backoff")
				}
				e.clock.Step(time.Second / 2)
				e.waitCalls(t, 3)
			}
			eventually(t, "delivered", func() bool { return e.counter(t, "events_delivered_total") == 1 })
			for _, r := range dropReasons {
				if got := e.counter(t, "events_dropped_total", "reason", r); got != 0 {
					t.Errorf("dropped{%s} = %v", r, got)
				}
			}
		})
	}
}

// Retries back off exponentially up to MaxDelay, honour Retry-After
// (capped) and coalesce newer changes of the object: the fake clock shows
// the exact delays.
func TestBackoffOnAFakeClock(t *testing.T) {
	retryAfter := map[int]time.Duration{5: 3 * time.Second, 6: time.Hour}
	e := newFakeEnv(t, Config{}, func(n int, ev contract.WatchEvent) Result {
		if ev.IsControl() || n > 8 {
			return status(200)
		}
		r := status(503)
		r.RetryAfter = retryAfter[n-1] // attempt numbers of the object
		return r
	})
	e.d.Enqueue("m", watch("a"))
	e.d.Start()
	// Object attempts 1..7 fail; delays: 1s, 2s, 4s, 8s (cap), then
	// Retry-After 3s → at least 3s of an 8s backoff: 8s; Retry-After 1h
	// capped at 8s; 8s.
	want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}
	for i, d := range want {
		e.waitCalls(t, i+2)
		if i == 1 {
			// Changes while waiting for a retry coalesce into it.
			for range 10 {
				e.d.Enqueue("m", watch("a"))
			}
			if got := e.d.Depth(); got != 1 {
				t.Fatalf("depth %d while retrying one object, want 1", got)
			}
		}
		e.clock.Step(d - time.Millisecond)
		if got := e.s.n(); got != i+2 {
			t.Fatalf("attempt %d came before its delay %v", i+2, d)
		}
		e.clock.Step(time.Millisecond)
	}
	e.waitCalls(t, 9)
	calls := objects(e.s.snapshot())
	for i := 1; i < len(calls); i++ {
		if got := calls[i].at.Sub(calls[i-1].at); got != want[i-1] {
			t.Errorf("delay before attempt %d = %v, want %v", i+1, got, want[i-1])
		}
	}
	eventually(t, "delivered", func() bool { return e.counter(t, "events_delivered_total") == 1 })
	if got := e.counter(t, "events_coalesced_total"); got != 10 {
		t.Errorf("coalesced %v, want 10", got)
	}
}

// Retry-After is read as seconds or as an HTTP date and bounded.
func TestRetryAfter(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"": 0, "0": 0, "-5": 0, "x": 0, "7": 7 * time.Second, "999999999999": time.Hour,
		now.Add(90 * time.Second).Format(http.TimeFormat): 90 * time.Second,
		now.Add(-time.Minute).Format(http.TimeFormat):     0,
		now.Add(48 * time.Hour).Format(http.TimeFormat):   time.Hour,
	} {
		if got := retryAfter(v, now); got != want {
			t.Errorf("retryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// A manager gets one startup resync when it becomes known (managers file or
// admission path), whatever way it is seen again.
func TestStartupResyncOncePerManager(t *testing.T) {
	e := newFakeEnv(t, Config{}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.SetManagers([]string{"a", "b", "Not_Valid"})
	e.d.SeeManager("a")
	e.d.SeeManager("c")
	e.d.Enqueue("c", watch("x"))
	e.d.SetManagers([]string{"a", "b"})
	e.d.Start()
	e.waitCalls(t, 4)
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := map[string]contract.ResyncReason{}
	for _, c := range e.s.snapshot() {
		if c.ev.Resync != "" {
			if _, dup := got[c.manager]; dup {
				t.Errorf("second resync for %s", c.manager)
			}
			got[c.manager] = c.ev.Resync
		}
	}
	want := map[string]contract.ResyncReason{"a": contract.ResyncStartup, "b": contract.ResyncStartup, "c": contract.ResyncStartup}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("resyncs %v, want %v", got, want)
	}
	if calls := e.s.snapshot(); !calls[0].ev.IsControl() || !calls[1].ev.IsControl() || !calls[2].ev.IsControl() {
		t.Errorf("resyncs not handed out before the change event: %+v", calls)
	}
	if got := e.counter(t, "resyncs_sent_total", "reason", "startup"); got != 3 {
		t.Errorf("resyncs sent %v", got)
	}
	if got := e.counter(t, "managers"); got != 3 {
		t.Errorf("managers gauge %v", got)
	}
}

// Resync requests coalesce into one pending per manager and are retried
// until delivered, with no maximum age.
func TestResyncCoalescesAndIsRetriedForever(t *testing.T) {
	down := true
	var mu sync.Mutex
	e := newFakeEnv(t, Config{MaxRetryAge: time.Minute}, func(int, contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return status(503)
		}
		return status(200)
	})
	e.d.SetManagers([]string{"m"})
	e.d.Start()
	e.waitCalls(t, 1)
	for range 1000 {
		e.d.Overflow("m")
	}
	if got := e.d.Depth(); got != 1 {
		t.Fatalf("depth %d after 1000 overflow requests, want 1", got)
	}
	// Hours of failures: far past the maximum retry age.
	for i := 2; i < 600; i++ {
		eventually(t, "retry scheduled", func() bool { return e.clock.HasWaiters() && e.s.n() == i-1 })
		e.clock.Step(8 * time.Second)
		e.waitCalls(t, i)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	e.clock.Step(8 * time.Second)
	eventually(t, "resync sent", func() bool { return e.counter(t, "resyncs_sent_total", "reason", "startup") == 1 })
	calls := e.s.snapshot()
	for _, c := range calls {
		if c.ev.Resync != contract.ResyncStartup || c.manager != "m" {
			t.Fatalf("unexpected call %+v", c)
		}
	}
	if got := e.counter(t, "resyncs_requested_total", "reason", "overflow"); got != 1000 {
		t.Errorf("overflow requests %v", got)
	}
	if got := e.counter(t, "events_dropped_total", "reason", DropExpired); got != 0 {
		t.Errorf("a resync expired")
	}
	// A later request is a new resync.
	e.d.Overflow("m")
	eventually(t, "overflow resync sent", func() bool { return e.counter(t, "resyncs_sent_total", "reason", "overflow") == 1 })
}

// A full queue drops the oldest pending entry, counts it and requests an
// overflow resync for its manager.
func TestOverflowRequestsAResync(t *testing.T) {
	e := newFakeEnv(t, Config{QueueSize: 2}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.SetManagers([]string{"m", "n"})
	e.d.Enqueue("n", watch("0"))
	e.d.Enqueue("m", watch("1"))
	e.d.Enqueue("m", watch("2")) // drops n/0
	if got := e.counter(t, "events_dropped_total", "reason", DropOverflow); got != 1 {
		t.Fatalf("dropped %v", got)
	}
	if got := e.counter(t, "resyncs_requested_total", "reason", "overflow"); got != 1 {
		t.Fatalf("overflow resyncs requested %v", got)
	}
	e.d.Start()
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	// n's startup resync was still pending: it covers the overflow.
	var got []string
	for _, c := range e.s.snapshot() {
		got = append(got, fmt.Sprintf("%s:%s%s", c.manager, c.ev.Resync, c.ev.Watched.Name))
	}
	if strings.Join(got, " ") != "m:startup n:startup m:1 m:2" && strings.Join(got, " ") != "n:startup m:startup m:1 m:2" {
		t.Fatalf("calls %v", got)
	}
	// Once n's resync is out, a new overflow of n is sent as such.
	e.d.Enqueue("m", watch("3"))
	e.d.Enqueue("m", watch("4"))
	e.d.Overflow("n")
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.counter(t, "resyncs_sent_total", "reason", "overflow"); got != 1 {
		t.Fatalf("overflow resyncs sent %v", got)
	}
}

// An event retried past the maximum age is dropped and an expired resync
// requested — and delivered once the KCP answers again.
func TestExpiredRequestsAResync(t *testing.T) {
	var mu sync.Mutex
	down := true
	e := newFakeEnv(t, Config{MaxRetryAge: time.Minute}, func(_ int, ev contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if down && !ev.IsControl() {
			return status(404)
		}
		return status(200)
	})
	e.d.Enqueue("m", watch("a"))
	e.d.Start()
	e.waitCalls(t, 2)
	for range 10 {
		e.clock.Step(8 * time.Second)
	}
	eventually(t, "expired", func() bool { return e.counter(t, "events_dropped_total", "reason", DropExpired) == 1 })
	eventually(t, "expired resync", func() bool { return e.counter(t, "resyncs_sent_total", "reason", "expired") == 1 })
	if got := e.d.Depth(); got != 0 {
		t.Fatalf("depth %d", got)
	}
}

// Heartbeats: one per known manager that opted in per interval, coalesced
// while one is pending, counted when they fail. A manager that did not opt
// in (the default) gets its startup resync but never a heartbeat.
func TestHeartbeats(t *testing.T) {
	var mu sync.Mutex
	fail := false
	e := newFakeEnv(t, Config{HeartbeatInterval: 5 * time.Minute}, func(_ int, ev contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if fail && ev.Heartbeat {
			return status(503)
		}
		return status(200)
	})
	e.d.SetManagers([]string{"a", "b", "kyma-listener"})
	e.d.SetHeartbeats([]string{"a", "b", "unknown"})
	e.d.Start()
	e.waitCalls(t, 3) // startup resyncs
	eventually(t, "ticker", e.clock.HasWaiters)
	e.clock.Step(5 * time.Minute)
	e.waitCalls(t, 5)
	eventually(t, "sent", func() bool { return e.counter(t, "heartbeats_sent_total") == 2 })
	var beaten []string
	for _, c := range e.s.snapshot()[3:] {
		body, _ := json.Marshal(c.ev)
		if string(body) != `{"watched":{},"watchedGvk":{},"heartbeat":true}` {
			t.Fatalf("heartbeat body %s", body)
		}
		beaten = append(beaten, c.manager)
	}
	if slices.Sort(beaten); !slices.Equal(beaten, []string{"a", "b"}) {
		t.Fatalf("heartbeats to %v, want a and b only", beaten)
	}
	mu.Lock()
	fail = true
	mu.Unlock()
	// Three intervals with the KCP failing: each step brings one failed
	// attempt per manager, and at most one heartbeat stays pending per
	// manager. Each step is awaited until its attempts failed and none is
	// in flight: their retries are then due on the fake clock, so the next
	// step reaches them (the retry of an attempt still in flight during a
	// step would be due after it).
	for i := range 3 {
		e.clock.Step(5 * time.Minute)
		eventually(t, "failed and pending", func() bool {
			return e.counter(t, "heartbeats_failed_total") == float64(2*(i+1)) && e.owed(2)()
		})
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	e.clock.Step(8 * time.Second)
	eventually(t, "recovered", func() bool { return e.counter(t, "heartbeats_sent_total") == 4 })
}

// A heartbeat queued for a manager that is not (or no longer) opted in is
// not sent.
func TestHeartbeatOptedOutWhileQueued(t *testing.T) {
	e := newFakeEnv(t, Config{HeartbeatInterval: 5 * time.Minute}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.SetManagers([]string{"a"})
	e.d.queue.Add(HeartbeatKey("a")) // queued, as by a tick just before the opt-out
	e.d.Start()
	e.waitCalls(t, 1) // startup resync only
	eventually(t, "heartbeat dropped", func() bool { return e.d.Depth() == 0 })
	if got := e.counter(t, "heartbeats_sent_total"); got != 0 || e.s.n() != 1 {
		t.Fatalf("heartbeats sent %v, calls %d", got, e.s.n())
	}
}

// Opting out drops a pending heartbeat and stops further ones.
func TestHeartbeatsOptOut(t *testing.T) {
	var mu sync.Mutex
	fail := true
	e := newFakeEnv(t, Config{HeartbeatInterval: 5 * time.Minute}, func(_ int, ev contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if fail && ev.Heartbeat {
			return status(503)
		}
		return status(200)
	})
	e.d.SetManagers([]string{"a"})
	e.d.SetHeartbeats([]string{"a"})
	e.d.Start()
	e.waitCalls(t, 1) // startup resync
	eventually(t, "ticker", e.clock.HasWaiters)
	e.clock.Step(5 * time.Minute)
	e.waitCalls(t, 2)
	eventually(t, "heartbeat waits to retry", func() bool { return e.counter(t, "event_retries_total") == 1 })
	e.d.SetHeartbeats(nil)
	if got := e.d.Depth(); got != 0 {
		t.Fatalf("depth %d: the pending heartbeat was not forgotten", got)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	for range 2 {
		e.clock.Step(5 * time.Minute)
	}
	if got := e.d.Depth(); got != 0 || e.s.n() != 2 {
		t.Fatalf("depth %d, calls %d: heartbeats after opting out", got, e.s.n())
	}
}

// Heartbeats and resyncs are handed out before a backlog of changes.
func TestControlEventsSkipTheBacklog(t *testing.T) {
	e := newFakeEnv(t, Config{QueueSize: 1000}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.SetManagers([]string{"m"})
	e.d.SetHeartbeats([]string{"m"})
	for i := range 500 {
		e.d.Enqueue("m", watch(fmt.Sprint(i)))
	}
	e.d.queue.Add(HeartbeatKey("m"))
	e.d.Start()
	e.waitCalls(t, 502)
	calls := e.s.snapshot()
	if calls[0].ev.Resync != contract.ResyncStartup || !calls[1].ev.Heartbeat {
		t.Fatalf("first calls %+v %+v", calls[0].ev, calls[1].ev)
	}
}

// The oldest-pending gauge follows the clock; the depth gauge counts
// what is owed.
func TestQueueGauges(t *testing.T) {
	e := newFakeEnv(t, Config{}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.Enqueue("m", watch("a"))
	e.clock.Step(30 * time.Second)
	e.d.Enqueue("m", watch("b"))
	if err := testutil.GatherAndCompare(e.reg, strings.NewReader(`
# HELP runtime_watcher_skr_webhook_queue_oldest_pending_age_seconds Age of the oldest undelivered change among the deliveries owed (0 when none).
# TYPE runtime_watcher_skr_webhook_queue_oldest_pending_age_seconds gauge
runtime_watcher_skr_webhook_queue_oldest_pending_age_seconds 30
# HELP runtime_watcher_skr_webhook_queue_depth Deliveries owed: pending entries (new or waiting to retry, resyncs and heartbeats included) plus in-flight ones changed meanwhile.
# TYPE runtime_watcher_skr_webhook_queue_depth gauge
runtime_watcher_skr_webhook_queue_depth 3
`), "runtime_watcher_skr_webhook_queue_oldest_pending_age_seconds", "runtime_watcher_skr_webhook_queue_depth"); err != nil {
		t.Fatal(err)
	}
	e.d.Start()
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.counter(t, "queue_oldest_pending_age_seconds"); got != 0 {
		t.Fatalf("age %v when empty", got)
	}
	if got := e.counter(t, "events_accepted_total"); got != 2 {
		t.Fatalf("accepted %v", got)
	}
}

// Drain delivers what is owed while events are still taken, making
// retries due at once; with the KCP down it ends with the context.
func TestDrain(t *testing.T) {
	var mu sync.Mutex
	down := true
	e := newFakeEnv(t, Config{}, func(int, contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if down {
			return status(503)
		}
		return status(200)
	})
	e.d.Enqueue("m", watch("a"))
	e.d.Start()
	e.waitCalls(t, 2)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.d.Drain(ctx); err == nil {
		t.Fatal("drain finished with the KCP down")
	}
	mu.Lock()
	down = false
	mu.Unlock()
	// No clock step: Drain expedites the retries waiting for their backoff.
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.d.Enqueue("m", watch("b")) // still taken after a drain
	if err := e.d.Drain(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := e.counter(t, "events_delivered_total"); got != 2 {
		t.Fatalf("delivered %v", got)
	}
}

// Managers dropped from the managers file are forgotten with their pending
// control events; the number of managers is bounded.
func TestManagersBound(t *testing.T) {
	e := newFakeEnv(t, Config{MaxManagers: 2}, func(int, contract.WatchEvent) Result { return status(200) })
	e.d.SetManagers([]string{"a", "b"})
	e.d.SeeManager("c")
	e.d.Overflow("d")
	if got := e.counter(t, "managers_refused_total"); got != 2 {
		t.Fatalf("refused %v", got)
	}
	e.d.SetManagers([]string{"a"})
	if got := fmt.Sprint(e.d.Managers()); got != "[a]" {
		t.Fatalf("managers %s", got)
	}
	if got := e.d.Depth(); got != 1 {
		t.Fatalf("depth %d: b's startup resync not forgotten", got)
	}
}

// A change, the resyncs and a heartbeat exactly as the HTTP sender puts
// them on the wire: what test/tools/kymalistener's test posts to Kyma's own
// listener (v1.4.3, unchanged), which accepts them as ordinary events (the
// resyncs and the heartbeat with an empty object), and what the e2e spec labelled kyma-listener sees
// arrive through the whole edge.
func TestSenderBodies(t *testing.T) {
	var got [][]byte
	kcp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var buf bytes.Buffer
		_, _ = buf.ReadFrom(r.Body)
		got = append(got, buf.Bytes())
	}))
	defer kcp.Close()
	s, err := NewHTTPSender(strings.TrimPrefix(kcp.URL, "http://"), kcp.Client)
	if err != nil {
		t.Fatal(err)
	}
	s.base.Scheme = "http" // plain HTTP test server; the body is what matters
	for _, ev := range []contract.WatchEvent{
		{
			Watched:    contract.ObjectKey{Namespace: "kyma-system", Name: "default"},
			WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		},
		{Resync: contract.ResyncStartup}, {Resync: contract.ResyncOverflow}, {Resync: contract.ResyncExpired}, {Heartbeat: true},
	} {
		if r := s.Send(context.Background(), "lifecycle-manager", ev); r.Outcome != Delivered {
			t.Errorf("%+v: %+v", ev, r)
		}
	}
	want := []string{
		`{"watched":{"namespace":"kyma-system","name":"default"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`,
		`{"watched":{},"watchedGvk":{},"resync":"startup"}`, `{"watched":{},"watchedGvk":{},"resync":"overflow"}`,
		`{"watched":{},"watchedGvk":{},"resync":"expired"}`, `{"watched":{},"watchedGvk":{},"heartbeat":true}`,
	}
	for i, w := range want {
		if i >= len(got) || string(got[i]) != w {
			t.Errorf("body %d = %s, want %s", i, got, w)
		}
	}
}

func TestResultClass(t *testing.T) {
	for r, want := range map[Result]string{
		{Status: 200}: "2xx", {Status: 302}: "3xx", {Status: 404}: "404", {Status: 418}: "4xx", {Status: 599}: "5xx",
		{Status: 0, Outcome: Retriable}: "transport", {Status: 0, Outcome: Rejected}: "invalid", {Status: 700}: "4xx",
	} {
		if got := ResultClass(r); got != want {
			t.Errorf("ResultClass(%+v) = %s, want %s", r, got, want)
		}
	}
}

// When the KCP answers again, retries waiting for their backoff go at once
// instead of up to MaxDelay later.
func TestRecoveryExpeditesRetries(t *testing.T) {
	var mu sync.Mutex
	down := true
	e := newFakeEnv(t, Config{}, func(_ int, ev contract.WatchEvent) Result {
		mu.Lock()
		defer mu.Unlock()
		if down && ev.Watched.Name == "a" {
			return status(503)
		}
		return status(200)
	})
	e.d.Enqueue("m", watch("a"))
	e.d.Start()
	e.waitCalls(t, 2)         // startup resync, a
	for i := 3; i <= 6; i++ { // a retried with growing backoff up to 8s
		e.clock.Step(8 * time.Second)
		e.waitCalls(t, i)
	}
	mu.Lock()
	down = false
	mu.Unlock()
	e.d.Enqueue("m", watch("b")) // delivered: the KCP is back
	eventually(t, "a delivered without a clock step", func() bool {
		return e.counter(t, "events_delivered_total") == 2
	})
}

// A manager the managers file drops (its Watcher was deleted: the KCP
// answers 404, no route) is forgotten although admission paths named it:
// its undelivered events are dropped and counted, as is its attempt in
// flight when that fails, instead of being retried for MaxRetryAge. In the
// e2e at 0f79661 two deleted Watchers' events kept the queue owing for an
// hour (and RuntimeWatcherQueueStuck would have fired). A manager only
// ever named by a path stays known.
func TestManagerRemovedFromTheFileTakesItsEvents(t *testing.T) {
	release := make(chan struct{})
	e := newFakeEnv(t, Config{}, func(_ int, ev contract.WatchEvent) Result {
		if ev.Watched.Name == "in-flight" {
			<-release
		}
		return status(404)
	})
	e.d.SetManagers([]string{"gone", "kept"})
	e.d.Enqueue("gone", watch("x"))
	e.d.Enqueue("gone", watch("y"))
	e.d.Enqueue("path-only", watch("z"))
	e.d.Start()
	// Three startup resyncs and three events, each failed once, wait for
	// their retries (the fake clock stands still).
	eventually(t, "every first attempt failed", e.owed(6))
	e.d.Enqueue("gone", watch("in-flight"))
	eventually(t, "in flight", func() bool { return e.s.n() == 7 })

	e.d.SetManagers([]string{"kept"})
	if got := e.counter(t, "events_dropped_total", "reason", DropManagerRemoved); got != 2 {
		t.Errorf("dropped as manager_removed: %v, want x and y", got)
	}
	if got := e.d.Managers(); !slices.Equal(slices.Sorted(slices.Values(got)), []string{"kept", "path-only"}) {
		t.Errorf("managers %v, want kept and path-only", got)
	}
	close(release)
	eventually(t, "the attempt in flight dropped, not retried", func() bool {
		return e.counter(t, "events_dropped_total", "reason", DropManagerRemoved) == 3
	})
	if !e.owed(3)() {
		t.Errorf("depth %d, want kept's and path-only's resyncs and z", e.d.Depth())
	}
	// Named again (a new Watcher of that manager): known, with a startup
	// resync, and its failures retried again.
	e.d.SetManagers([]string{"kept", "gone"})
	e.d.Enqueue("gone", watch("again"))
	eventually(t, "gone's new resync and event retried", e.owed(5))
}
