// Package pacing spaces module-sync's reconciler passes: a per-object
// exponential backoff for passes that failed for a reason that may pass,
// and jittered periodic passes.
package pacing

import (
	"math/rand/v2"
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
