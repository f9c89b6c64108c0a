// Package pacing spaces module-sync's reconciler passes: a per-object
// exponential backoff for passes that failed for a reason that may pass,
// jittered periodic passes, and turns: one pass per runtime at a time.
package pacing

import (
	"math/rand/v2"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
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
// them: a pass that finds its runtime busy is requeued (Wait) instead of
// waiting in a worker. The zero value is ready to use.
type Turns struct {
	mu   sync.Mutex
	busy map[string]bool
}

// Wait is how long a pass whose runtime is busy is requeued for.
const Wait = 250 * time.Millisecond

// Take takes runtime's turn; ok false while another pass holds it. Call
// release when the pass ends.
func (t *Turns) Take(runtime string) (release func(), ok bool) {
	if t == nil {
		return func() {}, true // no turns (a benchmark's comparison): every pass runs
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.busy[runtime] {
		return nil, false
	}
	if t.busy == nil {
		t.busy = map[string]bool{}
	}
	t.busy[runtime] = true
	return func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		delete(t.busy, runtime)
	}, true
}
