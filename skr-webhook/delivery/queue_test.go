package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	testingclock "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// newClock is a fake clock for queue tests.
func newClock() *testingclock.FakeClock {
	return testingclock.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
}

func key(name string) Key {
	return Key{
		Manager:   "lifecycle-manager",
		GVK:       contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		Namespace: "kcp-system",
		Name:      name,
	}
}

func mustGet(t *testing.T, q *Queue) *Lease {
	t.Helper()
	l, wait, _ := q.tryGet()
	if l == nil {
		t.Fatalf("nothing due (next in %v)", wait)
	}
	return l
}

func mustBeEmpty(t *testing.T, q *Queue) time.Duration {
	t.Helper()
	l, wait, _ := q.tryGet()
	if l != nil {
		t.Fatalf("unexpected lease for %s", l.Key.Name)
	}
	return wait
}

func TestQueueCoalescesABurst(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Clock: c})
	for i := 0; i < 1000; i++ {
		r := q.Add(key("a"))
		if (i > 0) != r.Coalesced || len(r.Dropped) != 0 {
			t.Fatalf("add %d: %+v", i, r)
		}
	}
	if d := q.Depth(); d != 1 {
		t.Fatalf("depth %d, want 1", d)
	}
	l := mustGet(t, q)
	if l.Key != key("a") || l.Attempt != 1 {
		t.Fatalf("lease %+v", l)
	}
	mustBeEmpty(t, q)
}

func TestQueueDropsOldestWhenFull(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 3, Clock: c})
	for _, n := range []string{"a", "b", "c"} {
		if r := q.Add(key(n)); len(r.Dropped) != 0 {
			t.Fatalf("dropped %v", r.Dropped)
		}
		c.Step(time.Millisecond)
	}
	q.Add(key("b")) // coalescing does not make b younger than a
	r := q.Add(key("d"))
	if len(r.Dropped) != 1 || r.Dropped[0] != key("a") {
		t.Fatalf("dropped %v, want [a]", r.Dropped)
	}
	if q.Depth() != 3 || q.Len() != 3 {
		t.Fatalf("depth %d len %d, want 3", q.Depth(), q.Len())
	}
	for _, want := range []string{"b", "c", "d"} {
		if got := mustGet(t, q).Key.Name; got != want {
			t.Fatalf("got %s, want %s", got, want)
		}
	}
}

func TestQueueChangeWhileInFlightIsDeliveredAgainAfterTheInterval(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Interval: time.Second, Clock: c})
	q.Add(key("a"))
	l := mustGet(t, q)
	c.Step(10 * time.Millisecond)
	if r := q.Add(key("a")); !r.Coalesced {
		t.Fatalf("change in flight not coalesced: %+v", r)
	}
	if d := q.Depth(); d != 1 {
		t.Fatalf("depth %d, want 1 (one delivery owed)", d)
	}
	q.Delivered(l)
	wait := mustBeEmpty(t, q)
	if wait != 990*time.Millisecond {
		t.Fatalf("next delivery in %v, want 990ms (interval from the last start)", wait)
	}
	c.Step(wait)
	l2 := mustGet(t, q)
	if l2.Key != key("a") || l2.Attempt != 1 {
		t.Fatalf("lease %+v", l2)
	}
	if want := l.Start.Add(10 * time.Millisecond); !l2.Since.Equal(want) {
		t.Fatalf("since %v, want the change's time %v", l2.Since, want)
	}
}

func TestQueueCoolingDelaysTheNextChangeOnly(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Interval: time.Second, Clock: c})
	q.Add(key("a"))
	q.Delivered(mustGet(t, q))
	c.Step(300 * time.Millisecond)
	for i := 0; i < 50; i++ { // a burst during the interval
		q.Add(key("a"))
	}
	if wait := mustBeEmpty(t, q); wait != 700*time.Millisecond {
		t.Fatalf("wait %v, want 700ms", wait)
	}
	c.Step(700 * time.Millisecond)
	q.Delivered(mustGet(t, q))
	// No further change: the cooling entry expires and a later change goes
	// out at once.
	c.Step(2 * time.Second)
	mustBeEmpty(t, q)
	if q.Len() != 0 {
		t.Fatalf("%d entries left after cooling", q.Len())
	}
	q.Add(key("a"))
	mustGet(t, q)
}

func TestQueueWithoutIntervalForgetsDeliveredItems(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Clock: c})
	q.Add(key("a"))
	q.Delivered(mustGet(t, q))
	if q.Len() != 0 {
		t.Fatalf("len %d", q.Len())
	}
	q.Add(key("a"))
	mustGet(t, q)
}

func TestQueueRetry(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Clock: c})
	q.Add(key("a"))
	l := mustGet(t, q)
	ok, dropped := q.Retry(l, c.Now().Add(time.Second), c.Now().Add(-time.Minute))
	if !ok || len(dropped) != 0 {
		t.Fatalf("retry %v %v", ok, dropped)
	}
	if wait := mustBeEmpty(t, q); wait != time.Second {
		t.Fatalf("wait %v", wait)
	}
	c.Step(time.Second)
	l = mustGet(t, q)
	if l.Attempt != 2 {
		t.Fatalf("attempt %d, want 2", l.Attempt)
	}
	// Its newest change before the cutoff: dropped.
	c.Step(time.Minute)
	if ok, _ := q.Retry(l, c.Now(), c.Now().Add(-time.Minute+time.Nanosecond)); ok {
		t.Fatal("expired item requeued")
	}
	if q.Len() != 0 {
		t.Fatal("expired item kept")
	}
}

func TestQueueChangeDuringRetryKeepsTheItemAlive(t *testing.T) {
	c := newClock()
	q := NewQueue(QueueConfig{Capacity: 10, Clock: c})
	q.Add(key("a"))
	l := mustGet(t, q)
	c.Step(59 * time.Second)
	q.Add(key("a")) // newer state arrives while the attempt fails
	c.Step(2 * time.Second)
	if ok, _ := q.Retry(l, c.Now(), c.Now().Add(-time.Minute)); !ok {
		t.Fatal("item with a recent change expired")
	}
	if d := q.Depth(); d != 1 {
		t.Fatalf("depth %d", d)
	}
	mustGet(t, q)
}

func TestQueueDrop(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 10})
	q.Add(key("a"))
	l := mustGet(t, q)
	q.Add(key("a"))
	q.Drop(l)
	if q.Len() != 0 || q.Depth() != 0 {
		t.Fatalf("len %d depth %d", q.Len(), q.Depth())
	}
}

func TestQueueCloseDrainsPendingThenStops(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 10})
	q.Add(key("a"))
	q.Add(key("b"))
	q.Close()
	if r := q.Add(key("c")); !r.Closed {
		t.Fatal("closed queue took an event")
	}
	ctx := context.Background()
	for _, want := range []string{"a", "b"} {
		l, ok := q.Get(ctx)
		if !ok || l.Key.Name != want {
			t.Fatalf("get: %v %v, want %s", l, ok, want)
		}
		q.Delivered(l)
	}
	if _, ok := q.Get(ctx); ok {
		t.Fatal("get after drain returned an item")
	}
}

func TestQueueDropPending(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 10})
	q.Add(key("a"))
	q.Add(key("b"))
	l := mustGet(t, q)
	keys := q.DropPending()
	if len(keys) != 1 || keys[0] != key("b") {
		t.Fatalf("dropped %v", keys)
	}
	q.Delivered(l)
	if q.Len() != 0 {
		t.Fatalf("len %d", q.Len())
	}
}

func TestQueueGetWaitsForWork(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 10})
	got := make(chan *Lease)
	for i := 0; i < 3; i++ {
		go func() {
			l, ok := q.Get(context.Background())
			if ok {
				got <- l
			}
		}()
	}
	for _, n := range []string{"a", "b", "c"} {
		q.Add(key(n))
	}
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		select {
		case l := <-got:
			seen[l.Key.Name] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("workers got only %v", seen)
		}
	}
	if len(seen) != 3 {
		t.Fatalf("seen %v", seen)
	}
}

func TestQueueGetEndsWithContext(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 10})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan bool)
	go func() {
		_, ok := q.Get(ctx)
		done <- ok
	}()
	cancel()
	if <-done {
		t.Fatal("get returned an item")
	}
}

func TestQueueMemoryIsBounded(t *testing.T) {
	q := NewQueue(QueueConfig{Capacity: 1000, Interval: time.Hour})
	dropped := 0
	for i := 0; i < 100000; i++ {
		dropped += len(q.Add(key(fmt.Sprint(i))).Dropped)
	}
	if q.Len() != 1000 || dropped != 99000 {
		t.Fatalf("len %d dropped %d", q.Len(), dropped)
	}
	// Delivered items cool down, bounded as well.
	for i := 0; i < 1000; i++ {
		q.Delivered(mustGet(t, q))
		q.Add(key(fmt.Sprint("x", i)))
	}
	for i := 0; i < 1000; i++ {
		q.Delivered(mustGet(t, q))
	}
	if q.Len() > 1000 {
		t.Fatalf("len %d after cooling, want ≤ capacity", q.Len())
	}
}
