// Package pacing spaces module-sync's reconciler passes: a per-object
// exponential backoff for passes that failed for a reason that may pass,
// jittered periodic passes, and turns: one pass per runtime at a time.
package pacing

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"
)

// NewBackoff is a per-object exponential backoff: base, doubling, at most
// maxDelay; Forget resets an object's.
func NewBackoff(base, maxDelay time.Duration) workqueue.TypedRateLimiter[string] {
	return workqueue.NewTypedItemExponentialFailureRateLimiter[string](base, maxDelay)
}

// Jitter spreads periodic passes by up to a tenth of d so that runtimes
// started together do not stay in step.
func Jitter(d time.Duration) time.Duration {
	return d + time.Duration(rand.Int64N(int64(d)/10+1))
}

// Turns gives each runtime at most one pass at a time across module-sync's
// workers, so that a slow or hostile runtime holds one worker, not all of
// them: a pass that finds its runtime busy leaves its worker at once and
// waits, off every worker, until the turn is released; then it is
// requeued (issue 36: a fixed 250 ms requeue stalled one round trip in
// five). The zero value is ready to use.
type Turns struct {
	mu sync.Mutex
	// busy: the runtimes whose turn is taken, each with the passes waiting
	// for it (by item, so a pass waits once however often it is retried).
	busy map[string]map[string]func()
}

// Wait is the fallback requeue of a pass that found its runtime busy: the
// release of the turn wakes it at once (Take's wake); should a wake-up
// ever be lost, the pass still comes back after Wait (nothing waits
// silently forever).
const Wait = 5 * time.Second

// Take takes runtime's turn for item; ok false while another pass holds it:
// then wake is called once, when that pass releases the turn (the caller
// requeues item there; item names the waiter, so a pass that asks again
// while it waits is woken once). Call release when the pass ends.
func (t *Turns) Take(runtime, item string, wake func()) (release func(), ok bool) {
	if t == nil {
		return func() {}, true // no turns (a benchmark's comparison): every pass runs
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if waiting, taken := t.busy[runtime]; taken {
		if waiting == nil {
			waiting = map[string]func(){}
			t.busy[runtime] = waiting
		}
		waiting[item] = wake
		return nil, false
	}
	if t.busy == nil {
		t.busy = map[string]map[string]func(){}
	}
	t.busy[runtime] = nil
	return func() {
		t.mu.Lock()
		waiting := t.busy[runtime]
		delete(t.busy, runtime)
		t.mu.Unlock()
		// Every waiter is requeued: one of them takes the turn, the others
		// wait again. Waking only one would stall the rest if that one
		// ends before it asks for the turn (its object was deleted).
		for _, wake := range waiting {
			wake()
		}
	}, true
}

// Waiting is how many passes wait for a turn (a metric's gauge).
func (t *Turns) Waiting() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for _, w := range t.busy {
		n += len(w)
	}
	return n
}

// Requeue hands a controller's own workqueue to the passes it wakes: add
// Source to the controller (WatchesRawSource); Wake(req) then adds req to
// that queue.
type Requeue struct {
	mu sync.Mutex
	q  workqueue.TypedRateLimitingInterface[reconcile.Request]
}

// Source captures the controller's queue when the controller starts.
func (r *Requeue) Source() source.Source {
	return source.Func(func(_ context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) error {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.q = q
		return nil
	})
}

// Wake returns the wake-up of req: it adds req to the controller's queue.
// Passes run only after the controller's sources started, so the queue is
// there whenever a pass asks to be woken.
func (r *Requeue) Wake(req reconcile.Request) func() {
	return func() { r.Add(req) }
}

// Started says whether the controller started (its queue is known).
func (r *Requeue) Started() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.q != nil
}

// Add adds req to the controller's queue; started false (nothing added)
// before the controller started: its start enqueues every object anyway.
func (r *Requeue) Add(req reconcile.Request) (started bool) {
	r.mu.Lock()
	q := r.q
	r.mu.Unlock()
	if q != nil {
		q.Add(req)
	}
	return q != nil
}
