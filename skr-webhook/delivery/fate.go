package delivery

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// This file is the one owner of an event's fate: attempt sends what a
// worker leased, and settle decides, in one switch, what happens to the
// event and to its manager after the answer. The queue only carries out
// what settle tells it (Delivered, Drop, Retry); the bookkeeping settle
// needs (resyncs, drop counts) is below it.

// attempt sends one leased event and settles its fate.
func (d *Dispatcher) attempt(l *Lease) {
	ev, ok := d.event(l)
	if !ok {
		d.queue.Drop(l)
		return
	}
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.AttemptTimeout)
	start := d.clock.Now()
	r := d.sender.Send(ctx, l.Key.Manager, ev)
	cancel()
	d.metrics.attemptDuration.WithLabelValues(string(r.Outcome)).Observe(d.clock.Since(start).Seconds())
	d.metrics.attempts.WithLabelValues(ResultClass(r)).Inc()
	d.noteStreak(l.Key.Manager, r)
	if l.Key.Control == ControlHeartbeat && r.Outcome != Delivered {
		d.metrics.heartbeatsFailed.Inc()
	}
	d.settle(l, ev, r)
}

// settle decides what happens to an event after an attempt
// (docs/architecture.md §3.8, "Delivery: nothing is lost silently"):
//
//	KCP answer                      the event                          its manager
//	2xx                             delivered (counted); a change      -
//	                                that came while in flight is sent
//	                                again after ObjectInterval
//	400, 413, 415, 422; unsendable  dropped, counted by reason:        -
//	                                the same body cannot pass
//	anything else (403 of a cache   retried at backoff(attempt,        -
//	behind, 404 of a route not yet  Retry-After), the object's newer
//	programmed, 408, 425, 429, 5xx, changes coalescing into it
//	a transport error)
//	  … and its newest change is    dropped, counted "expired"         an "expired" resync
//	  older than MaxRetryAge
//	  … of a manager the managers   dropped, counted "manager_removed" -
//	  file no longer names
//	  … 429 or 503 with             retried as above                   held: none of its deliveries
//	  Retry-After                                                      (resyncs, heartbeats included)
//	                                                                   goes before Retry-After ends
//	                                                                   (capped at MaxDelay); other
//	                                                                   managers go on
//
// Whenever the queue needs room for a re-sent or retried event it drops
// its oldest pending entries: they are counted "overflow" and their
// managers get an "overflow" resync (overflowed). A resync or heartbeat
// never expires and is never dropped for room; a resync that fails keeps
// its reason for the retry unless a newer request came (resyncDone). After
// an outage (nothing delivered for half of MaxDelay or more) the first
// delivery makes every waiting retry due at once.
func (d *Dispatcher) settle(l *Lease, ev contract.WatchEvent, r Result) {
	resync := l.Key.Control == ControlResync
	switch r.Outcome {
	case Delivered:
		d.recovered()
		switch l.Key.Control {
		case ControlResync:
			d.metrics.resyncsSent.WithLabelValues(string(ev.Resync)).Inc()
			d.resyncDone(l.Key.Manager, false)
		case ControlHeartbeat:
			d.metrics.heartbeatsSent.Inc()
		default:
			d.metrics.delivered.Inc()
			d.metrics.latency.Observe(d.clock.Since(l.Since).Seconds())
		}
		d.overflowed(d.queue.Delivered(l))

	case Rejected:
		d.queue.Drop(l)
		if resync {
			d.resyncDone(l.Key.Manager, false)
		}
		reason := dropReason(r.Status)
		d.metrics.dropped.WithLabelValues(reason).Inc()
		d.log.Error(r.Err, "KCP refused the event body, dropped", "reason", reason, "manager", l.Key.Manager,
			"gvk", l.Key.GVK, "namespace", l.Key.Namespace, "name", l.Key.Name, "resync", ev.Resync,
			"heartbeat", ev.Heartbeat, "status", r.Status)

	default: // retriable
		if IsTLSFailure(r.Err) {
			d.metrics.tlsFailures.Inc()
		}
		if l.Key.Control == ControlNone && d.wasRemoved(l.Key.Manager) {
			d.queue.Drop(l)
			d.dropped(DropManagerRemoved, []Key{l.Key})
			return
		}
		d.failing.Store(true)
		if resync {
			d.resyncDone(l.Key.Manager, true)
		}
		now := d.clock.Now()
		var expireBefore time.Time // control keys never expire
		if l.Key.Control == ControlNone {
			expireBefore = now.Add(-d.cfg.MaxRetryAge)
		}
		delay := d.backoff(l.Attempt, r.RetryAfter)
		if holdsManager(r) && d.queue.Hold(l.Key.Manager, now.Add(min(r.RetryAfter, d.cfg.MaxDelay))) {
			d.metrics.held.Inc()
		}
		requeued, dropped := d.queue.Retry(l, now.Add(delay), expireBefore)
		d.overflowed(dropped)
		if !requeued {
			d.dropped(DropExpired, []Key{l.Key})
			d.log.Error(r.Err, "event not delivered within the maximum retry age, dropped; requesting an expired resync",
				"manager", l.Key.Manager, "namespace", l.Key.Namespace, "name", l.Key.Name, "attempts", l.Attempt)
			d.Resync(l.Key.Manager, contract.ResyncExpired)
			return
		}
		d.metrics.retried.Inc()
		if d.ctx.Err() == nil && (l.Attempt == 1 || d.log.V(1).Enabled()) {
			d.log.Info("delivery failed, will retry", "manager", l.Key.Manager, "namespace", l.Key.Namespace,
				"name", l.Key.Name, "resync", ev.Resync, "heartbeat", ev.Heartbeat, "attempt", l.Attempt,
				"in", delay.String(), "status", r.Status, "error", errString(r.Err))
		}
	}
}

// holdsManager reports whether an answer holds its manager's deliveries:
// the KCP's "too many requests" (ext-authz's rate limit per runtime) or
// "unavailable" (a listener replica that cannot hand the event on) with a
// Retry-After. A change made meanwhile still ends in an event or, when
// the queue needs room, in an overflow resync (Queue.Hold).
func holdsManager(r Result) bool {
	return r.RetryAfter > 0 && (r.Status == http.StatusTooManyRequests || r.Status == http.StatusServiceUnavailable)
}

// recovered notes a delivery: when the KCP answers again after an outage
// (nothing delivered for half the largest delay or more), what waits for
// its backoff goes now rather than up to MaxDelay later. Partial failures
// (deliveries keep succeeding) keep their backoff.
func (d *Dispatcher) recovered() {
	now := d.clock.Now().UnixNano()
	prev := d.lastOK.Swap(now)
	if d.failing.Load() && time.Duration(now-prev) >= d.cfg.MaxDelay/2 && d.failing.CompareAndSwap(true, false) {
		d.queue.Expedite()
	}
}

// resyncDone ends a resync attempt: sent, dropped or to be retried.
func (d *Dispatcher) resyncDone(name string, retry bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.managers[name]
	if !ok {
		return
	}
	if retry && m.resync == "" {
		m.resync = m.sending
	}
	m.sending = ""
}

// overflowed counts object entries dropped for room and requests an
// overflow resync for each manager concerned.
func (d *Dispatcher) overflowed(keys []Key) {
	if len(keys) == 0 {
		return
	}
	d.dropped(DropOverflow, keys)
	last := ""
	for _, k := range keys {
		if k.Manager != last {
			d.Resync(k.Manager, contract.ResyncOverflow)
			last = k.Manager
		}
	}
}

func (d *Dispatcher) dropped(reason string, keys []Key) {
	if len(keys) == 0 {
		return
	}
	d.metrics.dropped.WithLabelValues(reason).Add(float64(len(keys)))
	for _, k := range keys {
		d.drops.note(reason, k)
	}
}

// dropReason names a refused body by its status.
func dropReason(status int) string {
	switch status {
	case http.StatusBadRequest:
		return DropBadRequest
	case http.StatusRequestEntityTooLarge:
		return DropTooLarge
	case http.StatusUnsupportedMediaType:
		return DropUnsupportedMediaType
	case http.StatusUnprocessableEntity:
		return DropUnprocessable
	default:
		return DropInvalid
	}
}

// ResultClass is the "result" label of one attempt: "2xx", "3xx", "5xx",
// the status for the 4xx the delivery rules name (400, 403, 404, 408, 413,
// 415, 422, 425, 429), "4xx" for other client errors, "transport" for no
// answer and "invalid" for an event that could not be sent.
func ResultClass(r Result) string {
	switch s := r.Status; {
	case s == 0 && r.Outcome == Rejected:
		return "invalid"
	case s == 0:
		return "transport"
	case s >= 200 && s < 300:
		return "2xx"
	case s >= 300 && s < 400:
		return "3xx"
	case s >= 500 && s < 600:
		return "5xx"
	}
	switch r.Status {
	case 400, 403, 404, 408, 413, 415, 422, 425, 429:
		return strconv.Itoa(r.Status)
	}
	return "4xx"
}

var resultClasses = contract.DeliveryClasses

// backoff is BaseDelay·2^(attempt-1), capped at MaxDelay, with "equal
// jitter" (half fixed, half random); a Retry-After asks for at least its
// delay, still capped at MaxDelay.
func (d *Dispatcher) backoff(attempt int, retryAfter time.Duration) time.Duration {
	delay := d.cfg.MaxDelay
	if attempt < 32 {
		if e := d.cfg.BaseDelay << (attempt - 1); e > 0 && e < delay {
			delay = e
		}
	}
	delay = delay/2 + d.cfg.Jitter(delay/2)
	if retryAfter > delay {
		delay = min(retryAfter, d.cfg.MaxDelay)
	}
	return delay
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// dropLog logs dropped events without flooding: the first drop at once,
// then at most one summary line per second.
type dropLog struct {
	log     logr.Logger
	mu      sync.Mutex
	last    time.Time
	pending map[string]int
}

func (l *dropLog) note(reason string, k Key) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= time.Second {
		l.last = now
		l.log.Info("event dropped", "reason", reason, "manager", k.Manager, "gvk", k.GVK,
			"namespace", k.Namespace, "name", k.Name, "moreSinceLastLog", l.pending)
		l.pending = nil
		return
	}
	if l.pending == nil {
		l.pending = map[string]int{}
	}
	l.pending[reason]++
}

func (l *dropLog) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 {
		l.log.Info("events dropped", "byReason", l.pending)
		l.pending = nil
	}
}
