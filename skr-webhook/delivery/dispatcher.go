// Package delivery sends WatchEvents from the SKR to the KCP
// (ARCHITECTURE.md §3.3) asynchronously: a bounded, coalescing in-memory
// queue keyed by manager + GVK + namespace/name, a pool of workers posting
// over one HTTP/2 mTLS client, retries with exponential backoff and jitter
// until a maximum age, and a bounded drain on shutdown. Enqueue never
// blocks; when the queue is full the oldest pending entry is dropped.
package delivery

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Sender makes one delivery attempt; ctx bounds it.
type Sender interface {
	Send(ctx context.Context, manager string, ev contract.WatchEvent) Result
}

// Config of a Dispatcher. Zero values take the defaults below.
type Config struct {
	QueueSize      int           // pending entries; default 10000
	Workers        int           // concurrent deliveries; default 16
	MaxRetryAge    time.Duration // drop a failing event after this; default 10m
	BaseDelay      time.Duration // first retry delay; default 200ms
	MaxDelay       time.Duration // largest retry delay; default 30s
	AttemptTimeout time.Duration // bounds one attempt; default 5s
	// ObjectInterval is the least time between two deliveries of one object
	// (changes in between coalesce into one delivery). Negative disables it;
	// default 1s.
	ObjectInterval time.Duration
	// Registerer takes the metrics; none are registered when nil.
	Registerer prometheus.Registerer
}

func (c *Config) defaults() {
	if c.QueueSize <= 0 {
		c.QueueSize = 10000
	}
	if c.Workers <= 0 {
		c.Workers = 16
	}
	if c.MaxRetryAge <= 0 {
		c.MaxRetryAge = 10 * time.Minute
	}
	if c.BaseDelay <= 0 {
		c.BaseDelay = 200 * time.Millisecond
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = 30 * time.Second
	}
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = c.BaseDelay
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = 5 * time.Second
	}
	switch {
	case c.ObjectInterval == 0:
		c.ObjectInterval = time.Second
	case c.ObjectInterval < 0:
		c.ObjectInterval = 0
	}
}

// Drop reasons (label "reason" of runtime_watcher_skr_webhook_events_dropped_total).
const (
	DropQueueFull = "queue_full"
	DropExpired   = "expired"
	DropRejected  = "rejected"
	DropShutdown  = "shutdown"
)

// Dispatcher owns the queue and the workers.
type Dispatcher struct {
	cfg     Config
	queue   *Queue
	sender  Sender
	log     logr.Logger
	metrics *metrics
	drops   dropLog

	ctx    context.Context // cancelled when the drain time is up
	cancel context.CancelFunc
	wg     sync.WaitGroup
	start  sync.Once
}

// New returns a dispatcher; Start starts its workers.
func New(cfg Config, sender Sender, log logr.Logger) *Dispatcher {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		cfg: cfg,
		queue: NewQueue(QueueConfig{
			Capacity: cfg.QueueSize, Interval: cfg.ObjectInterval, MaxRetryAge: cfg.MaxRetryAge,
		}),
		sender: sender,
		log:    log,
		ctx:    ctx,
		cancel: cancel,
	}
	d.drops.log = log
	d.metrics = newMetrics(cfg.Registerer, d.queue)
	return d
}

// Start starts the workers (once).
func (d *Dispatcher) Start() {
	d.start.Do(func() {
		for range d.cfg.Workers {
			d.wg.Add(1)
			go d.work()
		}
	})
}

// Enqueue takes one emitted event; it never blocks.
func (d *Dispatcher) Enqueue(manager string, ev contract.WatchEvent) {
	r := d.queue.Add(KeyOf(manager, ev))
	if r.Closed {
		d.metrics.dropped.WithLabelValues(DropShutdown).Inc()
		d.drops.note(DropShutdown, KeyOf(manager, ev))
		return
	}
	d.metrics.emitted.Inc()
	if r.Coalesced {
		d.metrics.coalesced.Inc()
	}
	d.dropped(DropQueueFull, r.Dropped)
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

// Depth is the number of deliveries still owed.
func (d *Dispatcher) Depth() int { return d.queue.Depth() }

// Shutdown stops taking events and lets the workers deliver what is pending
// until ctx ends; then it cancels attempts in flight, drops what is left
// (counted with reason "shutdown") and waits for the workers. It returns
// ctx's error when the drain did not finish in time.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	d.queue.Close()
	d.Start() // so a never-started dispatcher still drains
	finished := make(chan struct{})
	go func() {
		d.wg.Wait()
		close(finished)
	}()
	var err error
	select {
	case <-finished:
	case <-ctx.Done():
		err = ctx.Err()
	}
	d.cancel()
	<-finished
	d.dropped(DropShutdown, d.queue.DropPending())
	d.drops.flush()
	return err
}

func (d *Dispatcher) work() {
	defer d.wg.Done()
	for {
		l, ok := d.queue.Get(d.ctx)
		if !ok {
			return
		}
		d.attempt(l)
	}
}

func (d *Dispatcher) attempt(l *Lease) {
	ctx, cancel := context.WithTimeout(d.ctx, d.cfg.AttemptTimeout)
	start := time.Now()
	r := d.sender.Send(ctx, l.Key.Manager, l.Key.Event())
	cancel()
	d.metrics.attempts.WithLabelValues(string(r.Outcome)).Observe(time.Since(start).Seconds())
	switch r.Outcome {
	case Delivered:
		d.metrics.delivered.Inc()
		d.metrics.latency.Observe(time.Since(l.Since).Seconds())
		d.dropped(DropQueueFull, d.queue.Delivered(l))
	case Rejected:
		d.queue.Drop(l)
		d.metrics.dropped.WithLabelValues(DropRejected).Inc()
		d.log.Error(r.Err, "KCP rejected event, dropped", "manager", l.Key.Manager, "gvk", l.Key.GVK,
			"namespace", l.Key.Namespace, "name", l.Key.Name, "status", r.Status)
	default:
		if IsTLSFailure(r.Err) {
			d.metrics.tlsFailures.Inc()
		}
		delay := d.backoff(l.Attempt, r.RetryAfter)
		requeued, dropped := d.queue.Retry(l, time.Now().Add(delay))
		d.dropped(DropQueueFull, dropped)
		if !requeued {
			d.metrics.dropped.WithLabelValues(DropExpired).Inc()
			d.log.Error(r.Err, "event not delivered within the maximum retry age, dropped",
				"manager", l.Key.Manager, "namespace", l.Key.Namespace, "name", l.Key.Name, "attempts", l.Attempt)
			return
		}
		d.metrics.retried.Inc()
		if d.ctx.Err() == nil && (l.Attempt == 1 || d.log.V(1).Enabled()) {
			d.log.Info("delivery failed, will retry", "manager", l.Key.Manager, "namespace", l.Key.Namespace,
				"name", l.Key.Name, "attempt", l.Attempt, "in", delay.String(), "status", r.Status, "error", errString(r.Err))
		}
	}
}

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
	delay = delay/2 + rand.N(delay/2+1)
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
