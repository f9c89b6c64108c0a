// Package delivery sends WatchEvents from the SKR to the KCP
// (docs/architecture.md §4.4, §4.8) asynchronously: a bounded, coalescing
// in-memory queue keyed by manager + GVK + namespace/name, a pool of workers
// posting over one HTTP/2 mTLS client, retries with capped exponential
// backoff and jitter, and a bounded drain on shutdown. Enqueue never blocks.
//
// Nothing is lost silently: every change is followed by an event or by a
// resync of its manager. When the queue is full the oldest pending entry is
// dropped and an "overflow" resync requested; an event retried past the
// maximum age is dropped and an "expired" resync requested; every manager
// gets a "startup" resync when it first becomes known. Resyncs and
// heartbeats are coalesced to at most one pending per manager, retried until
// delivered and handed out before any object event.
//
// What happens to one event after an attempt is decided in one place,
// Dispatcher.settle (fate.go), whose comment is the whole table; the Queue
// (queue.go) only coalesces, orders and bounds entries and does what settle
// tells it.
package delivery

import (
	"cmp"
	"context"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Sender makes one delivery attempt; ctx bounds it.
type Sender interface {
	Send(ctx context.Context, manager string, ev contract.WatchEvent) Result
}

// Defaults of Config, the one definition of each: skr-webhook's flags
// default to them too.
const (
	DefaultQueueSize      = 10000
	DefaultWorkers        = 16
	DefaultMaxRetryAge    = time.Hour
	DefaultBaseDelay      = 200 * time.Millisecond
	DefaultMaxDelay       = 30 * time.Second
	DefaultAttemptTimeout = 5 * time.Second
	DefaultObjectInterval = time.Second
	DefaultMaxManagers    = 1024
)

// Config of a Dispatcher. Zero values take the Default* values above.
type Config struct {
	QueueSize      int           // pending object entries
	Workers        int           // concurrent deliveries
	MaxRetryAge    time.Duration // drop a failing event after this (expired resync)
	BaseDelay      time.Duration // first retry delay
	MaxDelay       time.Duration // largest retry delay, Retry-After included
	AttemptTimeout time.Duration // bounds one attempt
	// ObjectInterval is the least time between two deliveries of one object
	// (changes in between coalesce into one delivery). Negative disables it.
	ObjectInterval time.Duration
	// HeartbeatInterval: a heartbeat this often per known manager that
	// opted in (SetHeartbeats). Zero: none.
	HeartbeatInterval time.Duration
	// MaxManagers bounds the managers known (from the managers file and from
	// admission paths). Events of a manager beyond it are still delivered,
	// but it gets no resyncs or heartbeats (counted).
	MaxManagers int
	// Registerer takes the metrics; none are registered when nil.
	Registerer prometheus.Registerer
	// Clock is the clock; the real one when nil (tests pass a fake one).
	Clock clock.WithTicker
	// Jitter returns a random duration in [0, n]; rand.N when nil.
	Jitter func(n time.Duration) time.Duration
}

func (c *Config) defaults() {
	if c.QueueSize <= 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Workers <= 0 {
		c.Workers = DefaultWorkers
	}
	if c.MaxRetryAge <= 0 {
		c.MaxRetryAge = DefaultMaxRetryAge
	}
	if c.BaseDelay <= 0 {
		c.BaseDelay = DefaultBaseDelay
	}
	if c.MaxDelay <= 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.MaxDelay < c.BaseDelay {
		c.MaxDelay = c.BaseDelay
	}
	if c.AttemptTimeout <= 0 {
		c.AttemptTimeout = DefaultAttemptTimeout
	}
	switch {
	case c.ObjectInterval == 0:
		c.ObjectInterval = DefaultObjectInterval
	case c.ObjectInterval < 0:
		c.ObjectInterval = 0
	}
	if c.MaxManagers <= 0 {
		c.MaxManagers = DefaultMaxManagers
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	if c.Jitter == nil {
		c.Jitter = func(n time.Duration) time.Duration { return rand.N(n + 1) }
	}
}

// Drop reasons (label "reason" of runtime_watcher_skr_webhook_events_dropped_total).
const (
	// DropOverflow: the queue was full; the oldest pending entry was dropped
	// and an overflow resync requested.
	DropOverflow = "overflow"
	// DropExpired: retried past the maximum age; an expired resync was
	// requested.
	DropExpired = "expired"
	// DropShutdown: left when the drain time was up; the next pod's startup
	// resync covers it.
	DropShutdown = "shutdown"
	// The KCP refused the body itself (400, 413, 415, 422): retrying the
	// same body cannot help.
	DropBadRequest           = "bad_request"
	DropTooLarge             = "too_large"
	DropUnsupportedMediaType = "unsupported_media_type"
	DropUnprocessable        = "unprocessable"
	// DropInvalid: the event could not be sent at all (e.g. an invalid
	// manager name).
	DropInvalid = "invalid"
	// DropManagerRemoved: the managers file no longer names the manager
	// (its Watcher was deleted, or lost its route): its undelivered events
	// went with it — retrying them would meet a route that is gone for up
	// to MaxRetryAge — and there is nobody left to resync.
	DropManagerRemoved = "manager_removed"
)

var dropReasons = []string{DropOverflow, DropExpired, DropShutdown, DropBadRequest, DropTooLarge,
	DropUnsupportedMediaType, DropUnprocessable, DropInvalid, DropManagerRemoved}

// manager is what the dispatcher knows of one manager.
type manager struct {
	fromFile, fromPath bool
	resync             contract.ResyncReason // pending resync: the reason the next one carries
	sending            contract.ResyncReason // resync in flight
}

// Dispatcher owns the queue, the workers and the managers known.
type Dispatcher struct {
	cfg     Config
	clock   clock.WithTicker
	queue   *Queue
	sender  Sender
	log     logr.Logger
	metrics *metrics
	drops   dropLog

	mu       sync.Mutex
	managers map[string]*manager
	// removed: managers the managers file named and no longer names
	// (SetManagers), until they become known again; at most MaxManagers.
	removed map[string]bool
	optedIn map[string]bool // managers opted in to heartbeats (SetHeartbeats)
	failing atomic.Bool     // an attempt failed retriably since the last recovery
	lastOK  atomic.Int64    // clock time (UnixNano) of the last delivery

	// streaks: managers whose every attempt failed since the time given,
	// the last with the class given (FailingManagers; health reports).
	streakMu sync.Mutex
	streaks  map[string]streak

	ctx      context.Context // cancelled when the drain time is up
	cancel   context.CancelFunc
	stopping chan struct{} // closed by Shutdown: stops the heartbeats
	stopOnce sync.Once
	wg       sync.WaitGroup
	start    sync.Once
}

// New returns a dispatcher; Start starts its workers.
func New(cfg Config, sender Sender, log logr.Logger) *Dispatcher {
	cfg.defaults()
	ctx, cancel := context.WithCancel(context.Background())
	d := &Dispatcher{
		cfg:   cfg,
		clock: cfg.Clock,
		queue: NewQueue(QueueConfig{
			Capacity: cfg.QueueSize, Interval: cfg.ObjectInterval, Clock: cfg.Clock, MaxHolds: cfg.MaxManagers,
		}),
		sender:   sender,
		log:      log,
		managers: map[string]*manager{},
		removed:  map[string]bool{},
		streaks:  map[string]streak{},
		ctx:      ctx,
		cancel:   cancel,
		stopping: make(chan struct{}),
	}
	d.drops.log = log
	d.metrics = newMetrics(cfg.Registerer, d)
	return d
}

// Start starts the workers and the heartbeats (once).
func (d *Dispatcher) Start() {
	d.start.Do(func() {
		for range d.cfg.Workers {
			d.wg.Add(1)
			go d.work()
		}
		if d.cfg.HeartbeatInterval > 0 {
			d.wg.Add(1)
			go d.heartbeats()
		}
	})
}

// Enqueue takes one emitted event; it never blocks. A manager seen for the
// first time becomes known (startup resync).
func (d *Dispatcher) Enqueue(manager string, ev contract.WatchEvent) {
	d.SeeManager(manager)
	k := KeyOf(manager, ev)
	r := d.queue.Add(k)
	if r.Closed {
		d.dropped(DropShutdown, []Key{k})
		return
	}
	d.metrics.accepted.Inc()
	if r.Coalesced {
		d.metrics.coalesced.Inc()
	}
	d.overflowed(r.Dropped)
}

// SeeManager records a manager named by an admission path
// (/validate/<manager>). The first time, it becomes known: it gets a
// startup resync (the webhook cannot know what it missed) and heartbeats.
func (d *Dispatcher) SeeManager(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if m, ok := d.managers[name]; ok {
		m.fromPath = true
		return
	}
	if m := d.addManager(name); m != nil {
		m.fromPath = true
	}
}

// SetManagers sets the managers named by the managers file. New ones get a
// startup resync. One the file named before and no longer names is
// forgotten, also when it was seen in an admission path: vs-controller
// writes the file and the webhook configuration from the same Watchers,
// so its webhook is gone too (the kubelet updates a mounted file a while
// after). Its pending resync and heartbeat are dropped, and its
// undelivered events, counted (DropManagerRemoved); so is an attempt of it
// in flight that fails. One only ever seen in a path (not yet in the file,
// or no file) stays known.
func (d *Dispatcher) SetManagers(names []string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	named := make(map[string]bool, len(names))
	for _, n := range names {
		named[n] = true
		if m, ok := d.managers[n]; ok {
			m.fromFile = true
		} else if m := d.addManager(n); m != nil {
			m.fromFile = true
		}
	}
	for n, m := range d.managers {
		if named[n] || !m.fromFile {
			continue
		}
		delete(d.managers, n)
		if len(d.removed) >= d.cfg.MaxManagers {
			clear(d.removed) // bounded: older removals retry until they expire
		}
		d.removed[n] = true
		var events []Key
		for _, k := range d.queue.ForgetManager(n) {
			if k.Control == ControlNone {
				events = append(events, k)
			}
		}
		d.dropped(DropManagerRemoved, events)
		d.log.Info("manager no longer in the managers file: forgotten, with its undelivered events", "manager", n, "dropped", len(events))
	}
}

// wasRemoved says whether the managers file dropped manager since it was
// last known.
func (d *Dispatcher) wasRemoved(manager string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.removed[manager]
}

// SetHeartbeats sets the managers opted in to heartbeats (the managers
// file's "<manager> heartbeats" lines). Only a known one that opted in
// gets heartbeats; by default none does, as Kyma's listener hands a
// heartbeat to its operator as an ordinary event (a full reconcile).
func (d *Dispatcher) SetHeartbeats(names []string) {
	set := make(map[string]bool, len(names))
	for _, n := range names {
		set[n] = true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.optedIn = set
	for n := range d.managers {
		if !set[n] {
			d.queue.Forget(HeartbeatKey(n))
		}
	}
}

// heartbeatManagers returns the known managers opted in to heartbeats.
func (d *Dispatcher) heartbeatManagers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for n := range d.managers {
		if d.optedIn[n] {
			out = append(out, n)
		}
	}
	return out
}

// Managers returns the known managers.
func (d *Dispatcher) Managers() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]string, 0, len(d.managers))
	for n := range d.managers {
		out = append(out, n)
	}
	return out
}

// addManager makes a manager known and requests its startup resync; nil
// when it is invalid or the bound is reached. d.mu is held.
func (d *Dispatcher) addManager(name string) *manager {
	if !contract.ValidManager(name) {
		return nil
	}
	if len(d.managers) >= d.cfg.MaxManagers {
		d.metrics.managersRefused.Inc()
		return nil
	}
	m := &manager{}
	d.managers[name] = m
	delete(d.removed, name)
	d.requestResync(name, m, contract.ResyncStartup)
	return m
}

// Overflow requests an overflow resync for a manager: call it whenever a
// change of that manager may have been lost because a bound was hit (a
// review refused for too many in flight, a review too large to read, ...).
// It never blocks and costs O(1): requests coalesce into at most one
// pending resync per manager. An unknown manager becomes known first (its
// startup resync then covers the overflow).
func (d *Dispatcher) Overflow(manager string) { d.Resync(manager, contract.ResyncOverflow) }

// Resync requests a resync of a manager with the given reason, coalesced
// with one already pending.
func (d *Dispatcher) Resync(name string, reason contract.ResyncReason) {
	d.mu.Lock()
	defer d.mu.Unlock()
	m, ok := d.managers[name]
	if !ok {
		if m = d.addManager(name); m == nil {
			return
		}
		m.fromPath = true
	}
	d.requestResync(name, m, reason)
}

// requestResync: d.mu is held.
func (d *Dispatcher) requestResync(name string, m *manager, reason contract.ResyncReason) {
	d.metrics.resyncsRequested.WithLabelValues(string(reason)).Inc()
	if m.resync != "" {
		return // one is pending; any resync re-reads everything
	}
	m.resync = reason
	if r := d.queue.Add(ResyncKey(name)); r.Closed {
		m.resync = ""
		d.dropped(DropShutdown, []Key{ResyncKey(name)})
	}
}

// Depth is the number of deliveries still owed.
func (d *Dispatcher) Depth() int { return d.queue.Depth() }

// Drain delivers what is owed while still taking new events: retries
// waiting for their backoff are made due at once, and Drain returns when
// nothing is pending or in flight, or with ctx's error when ctx ends first.
func (d *Dispatcher) Drain(ctx context.Context) error {
	d.Start()
	d.queue.Expedite()
	return d.queue.WaitIdle(ctx)
}

// Shutdown stops taking events and lets the workers deliver what is pending
// until ctx ends; then it cancels attempts in flight, drops what is left
// (counted with reason "shutdown": the next pod's startup resync covers it)
// and waits for the workers. It returns ctx's error when the drain did not
// finish in time.
func (d *Dispatcher) Shutdown(ctx context.Context) error {
	d.stopOnce.Do(func() { close(d.stopping) })
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

func (d *Dispatcher) heartbeats() {
	defer d.wg.Done()
	t := d.clock.NewTicker(d.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-d.stopping:
			return
		case <-t.C():
			for _, m := range d.heartbeatManagers() {
				d.queue.Add(HeartbeatKey(m))
			}
		}
	}
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

// event builds what a lease sends; false when there is nothing to send (a
// resync of a manager forgotten meanwhile, a heartbeat of a manager no
// longer opted in).
func (d *Dispatcher) event(l *Lease) (contract.WatchEvent, bool) {
	if l.Key.Control != ControlResync && l.Key.Control != ControlHeartbeat {
		return l.Key.Event(), true
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.Key.Control == ControlHeartbeat {
		return l.Key.Event(), d.optedIn[l.Key.Manager]
	}
	m, ok := d.managers[l.Key.Manager]
	if !ok {
		return contract.WatchEvent{}, false
	}
	if m.resync != "" { // a retry keeps its reason unless a new request came
		m.sending, m.resync = m.resync, ""
	}
	if m.sending == "" {
		return contract.WatchEvent{}, false
	}
	return contract.WatchEvent{Resync: m.sending}, true
}

// streak: every attempt for a manager failed since since; class is the last.
type streak struct {
	since time.Time
	class string
}

// noteStreak: a delivery ends a manager's failing streak, a retriable
// failure starts or extends it; a refused body says nothing of the path.
func (d *Dispatcher) noteStreak(manager string, r Result) {
	d.streakMu.Lock()
	defer d.streakMu.Unlock()
	switch r.Outcome {
	case Delivered:
		delete(d.streaks, manager)
	case Retriable:
		s, ok := d.streaks[manager]
		if !ok {
			if len(d.streaks) >= d.cfg.MaxManagers {
				return
			}
			s.since = d.clock.Now()
		}
		s.class = ResultClass(r)
		d.streaks[manager] = s
	}
}

// Recovered is told that the path to the KCP works again (a health report
// was taken after one that was not): every entry waiting for its retry
// backoff is due now, and the failing streaks, the outage's, are
// forgotten (a manager that still fails starts a new one).
func (d *Dispatcher) Recovered() {
	d.streakMu.Lock()
	clear(d.streaks)
	d.streakMu.Unlock()
	d.queue.Expedite()
}

// FailingManagers are the managers whose every delivery attempt failed
// retriably since their last delivery, longest failing first, at most
// contract.MaxHealthManagers: what the health report carries.
func (d *Dispatcher) FailingManagers() []contract.ManagerDelivery {
	now := d.clock.Now()
	d.streakMu.Lock()
	out := make([]contract.ManagerDelivery, 0, len(d.streaks))
	for m, s := range d.streaks {
		if !contract.ValidManager(m) {
			continue
		}
		secs := min(max(int64(now.Sub(s.since)/time.Second), 0), contract.MaxFailingSeconds)
		out = append(out, contract.ManagerDelivery{Name: m, Result: s.class, FailingSeconds: secs})
	}
	d.streakMu.Unlock()
	slices.SortFunc(out, func(a, b contract.ManagerDelivery) int {
		if c := cmp.Compare(b.FailingSeconds, a.FailingSeconds); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out[:min(len(out), contract.MaxHealthManagers)]
}
