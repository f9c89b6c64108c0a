package delivery

import (
	"strconv"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// A 429 (or 503) with Retry-After holds every delivery of its manager —
// the retry, new changes and its resync — until Retry-After has passed;
// another manager's deliveries go on meanwhile. The fake clock shows when
// each was sent.
func TestRetryAfterHoldsTheManager(t *testing.T) {
	for _, code := range []int{429, 503} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			limited := true
			e := newFakeEnv(t, Config{BaseDelay: 100 * time.Millisecond, MaxDelay: 30 * time.Second}, nil)
			t0 := e.clock.Now()
			e.s.answer = func(_ int, ev contract.WatchEvent) Result {
				if ev.Watched.Name == "a" && limited {
					limited = false // only the first attempt (workers: 1)
					r := status(code)
					r.RetryAfter = 5 * time.Second
					return r
				}
				return status(200)
			}
			e.d.Enqueue("m", watch("a"))
			e.d.Enqueue("other", watch("x"))
			e.d.Start()
			eventually(t, "m/a refused, both startup resyncs and other/x delivered", func() bool {
				return e.counter(t, "manager_holds_total") == 1 && e.counter(t, "events_delivered_total") == 1 &&
					e.counter(t, "resyncs_sent_total", "reason", "startup") == 2 && inFlight(e.d.queue) == 0
			})
			if got := e.d.queue.HeldUntil("m"); !got.Equal(t0.Add(5 * time.Second)) {
				t.Fatalf("m held until %v, want t0+5s", got)
			}
			// While m is held: a new change of m, m's resync, and other's change.
			e.d.Enqueue("m", watch("b"))
			e.d.Overflow("m")
			e.d.Enqueue("other", watch("y"))
			eventually(t, "other/y delivered while m is held", func() bool { return e.counter(t, "events_delivered_total") == 2 })
			e.clock.Step(5*time.Second - time.Millisecond)
			eventually(t, "m's three deliveries owed", e.owed(3))
			e.clock.Step(time.Millisecond)
			eventually(t, "m's retry, change and resync delivered", func() bool {
				return e.counter(t, "events_delivered_total") == 4 && e.counter(t, "resyncs_sent_total", "reason", "overflow") == 1
			})
			for _, c := range e.s.snapshot() {
				if c.manager == "m" && c.at.After(t0) && c.at.Before(t0.Add(5*time.Second)) {
					t.Errorf("m sent %+v at t0+%v, during its hold", c.ev, c.at.Sub(t0))
				}
				if c.manager == "other" && !c.at.Equal(t0) {
					t.Errorf("other sent %+v at t0+%v: held with m", c.ev, c.at.Sub(t0))
				}
			}
		})
	}
}

// Other answers, or no Retry-After, hold nothing: the retry's own backoff
// applies and the manager's other deliveries go.
func TestNoHoldWithoutRetryAfter(t *testing.T) {
	for _, r := range []Result{
		{Outcome: Retriable, Status: 429},
		{Outcome: Retriable, Status: 500, RetryAfter: time.Second},
		{Outcome: Retriable, Status: 404, RetryAfter: time.Second},
		{Outcome: Retriable, RetryAfter: time.Second},
	} {
		if holdsManager(r) {
			t.Errorf("%+v holds its manager", r)
		}
	}
	for _, r := range []Result{{Outcome: Retriable, Status: 429, RetryAfter: time.Second}, {Outcome: Retriable, Status: 503, RetryAfter: time.Second}} {
		if !holdsManager(r) {
			t.Errorf("%+v does not hold its manager", r)
		}
	}
}

// §3.8 while held: changes keep coalescing and counting against the
// capacity; when the queue needs room the oldest go, counted, and the
// manager's overflow resync — held with it — is sent when the hold ends.
// Nothing is lost silently.
func TestHoldOverflowEndsInAResync(t *testing.T) {
	refused := false
	e := newFakeEnv(t, Config{QueueSize: 4, BaseDelay: 100 * time.Millisecond, MaxDelay: 30 * time.Second}, nil)
	e.s.answer = func(_ int, ev contract.WatchEvent) Result {
		if !ev.IsControl() && !refused {
			refused = true
			r := status(429)
			r.RetryAfter = 10 * time.Second
			return r
		}
		return status(200)
	}
	e.d.Enqueue("m", watch("o-0"))
	e.d.Start()
	eventually(t, "m held", func() bool { return e.counter(t, "manager_holds_total") == 1 && inFlight(e.d.queue) == 0 })
	for i := 1; i <= 20; i++ {
		e.d.Enqueue("m", watch(objectName(i)))
		e.d.Enqueue("m", watch(objectName(i))) // coalesces
	}
	if got := e.counter(t, "events_coalesced_total"); got != 20 {
		t.Errorf("coalesced %v, want 20", got)
	}
	// 21 objects into 4 places: 17 dropped for room, counted.
	if got := e.counter(t, "events_dropped_total", "reason", "overflow"); got != 17 {
		t.Errorf("dropped for room %v, want 17", got)
	}
	if got := len(objects(e.s.snapshot())); got != 1 {
		t.Fatalf("%d object attempts while held, want 1 (the refused one)", got)
	}
	e.clock.Step(10 * time.Second)
	eventually(t, "after the hold: the overflow resync and the 4 objects kept", func() bool {
		return e.counter(t, "resyncs_sent_total", "reason", "overflow") == 1 && e.counter(t, "events_delivered_total") == 4
	})
}

func objectName(i int) string { return "o-" + strconv.Itoa(i) }

// A hold extends, never shortens; ends by itself; at most MaxHolds
// managers are held (expired holds make room).
func TestQueueHold(t *testing.T) {
	e := newFakeEnv(t, Config{}, func(int, contract.WatchEvent) Result { return status(200) })
	q := NewQueue(QueueConfig{Capacity: 10, Clock: e.clock, MaxHolds: 2})
	t0 := e.clock.Now()
	if !q.Hold("a", t0.Add(5*time.Second)) || !q.Hold("a", t0.Add(2*time.Second)) {
		t.Fatal("hold refused")
	}
	if got := q.HeldUntil("a"); !got.Equal(t0.Add(5 * time.Second)) {
		t.Fatalf("a held until t0+%v, want 5s (a shorter hold does not shorten)", got.Sub(t0))
	}
	q.Hold("a", t0.Add(7*time.Second))
	if got := q.HeldUntil("a"); !got.Equal(t0.Add(7 * time.Second)) {
		t.Fatalf("a held until t0+%v, want 7s", got.Sub(t0))
	}
	if !q.Hold("b", t0.Add(time.Second)) {
		t.Fatal("second hold refused")
	}
	if q.Hold("c", t0.Add(time.Second)) {
		t.Fatal("a third manager held with MaxHolds 2")
	}
	e.clock.Step(time.Second)
	if !q.HeldUntil("b").IsZero() {
		t.Fatal("b's hold did not end")
	}
	if !q.Hold("c", t0.Add(3*time.Second)) {
		t.Fatal("c refused though b's hold has ended")
	}
}
