package delivery

import (
	"container/heap"
	"container/list"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Key identifies one watched object of one manager: the unit of coalescing.
// A WatchEvent carries nothing but this key, so all changes of one key are
// delivered by one POST sent after the last of them. A key with a Control
// kind stands for a manager's resync or heartbeat (no object): at most one of
// each is pending per manager.
type Key struct {
	Manager   string
	GVK       contract.GroupVersionKind
	Namespace string
	Name      string
	Control   Control
}

// Control tells an object key from a manager's resync or heartbeat key.
type Control uint8

// Control kinds.
const (
	// ControlNone: the key names an object.
	ControlNone Control = iota
	// ControlResync: the manager's pending resync.
	ControlResync
	// ControlHeartbeat: the manager's pending heartbeat.
	ControlHeartbeat
)

// ResyncKey is the key of a manager's resync.
func ResyncKey(manager string) Key { return Key{Manager: manager, Control: ControlResync} }

// HeartbeatKey is the key of a manager's heartbeat.
func HeartbeatKey(manager string) Key { return Key{Manager: manager, Control: ControlHeartbeat} }

// KeyOf returns the key of a manager's event.
func KeyOf(manager string, ev contract.WatchEvent) Key {
	return Key{Manager: manager, GVK: ev.WatchedGvk, Namespace: ev.Watched.Namespace, Name: ev.Watched.Name}
}

// Event returns the WatchEvent of an object key (or the heartbeat of a
// heartbeat key; a resync key's reason is kept by the Dispatcher).
func (k Key) Event() contract.WatchEvent {
	if k.Control == ControlHeartbeat {
		return contract.WatchEvent{Heartbeat: true}
	}
	return contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: k.Namespace, Name: k.Name},
		WatchedGvk: k.GVK,
	}
}

type state uint8

const (
	// statePending: waiting in the heap for its due time (new or retrying).
	statePending state = iota
	// stateInflight: a worker holds it.
	stateInflight
	// stateCooling: delivered; kept until due so a new change of the same
	// object waits for the per-object interval. Not a pending delivery.
	stateCooling
)

type item struct {
	key      Key
	state    state
	dirty    bool      // changed while in flight
	since    time.Time // oldest undelivered change (delivery latency)
	dirtyAt  time.Time // first change while in flight
	changed  time.Time // newest change (retry age)
	attempts int       // failed attempts since the last delivery
	due      time.Time
	seq      uint64
	index    int           // heap index; -1 when not in the heap
	elem     *list.Element // in the pending or the cooling list
}

// AddResult tells what Add did.
type AddResult struct {
	// Coalesced: the object already had a pending or in-flight delivery that
	// will (again) carry its latest state; no new entry was made.
	Coalesced bool
	// Dropped lists the oldest pending entries dropped to make room.
	Dropped []Key
	// Closed: the queue is shut down and took nothing.
	Closed bool
}

// Lease is an item a worker holds between Get and Done/Retry/Drop.
type Lease struct {
	Key     Key
	Attempt int       // 1 for the first attempt after a change
	Since   time.Time // oldest undelivered change
	Start   time.Time // when Get handed it out
	it      *item
}

// QueueConfig bounds a Queue.
type QueueConfig struct {
	// Capacity bounds pending entries; when a new object arrives at a full
	// queue the oldest pending entry is dropped. At least 1.
	// Control keys (resyncs, heartbeats) do not count against it and are
	// never dropped for room: there are at most two per manager.
	Capacity int
	// Interval is the least time between the starts of two deliveries of one
	// object; changes in between coalesce into one delivery at its end.
	// Zero disables it.
	Interval time.Duration
	// Clock is the clock (times and timers); the real one when nil.
	Clock clock.WithTicker
	// MaxHolds bounds the managers held at once (Hold); 1024 when 0.
	MaxHolds int
}

// Queue is a bounded, coalescing, delaying work queue keyed by Key. Add
// never blocks. Every key is in at most one of: pending (waiting for its due
// time), in flight (held by one worker; a change meanwhile marks it dirty so
// it is delivered again afterwards) or cooling (recently delivered). Memory is
// bounded by twice the capacity plus the number of workers plus two control
// keys per manager. Pending control keys are handed out before any object
// key, so a resync or heartbeat never waits behind a backlog.
type Queue struct {
	cfg QueueConfig

	mu      sync.Mutex
	items   map[Key]*item
	heap    itemHeap      // pending and cooling object items by due time
	ctrl    itemHeap      // pending control items by due time
	flight  int           // items in flight
	idle    chan struct{} // closed (and cleared) when nothing is owed or in flight
	pending list.List     // pending items, oldest first
	cooling list.List     // cooling items, oldest first
	dirty   int           // in-flight items changed meanwhile
	seq     uint64
	closed  bool
	// holds: managers whose deliveries wait until the time given (Hold).
	holds map[string]time.Time
	wake  chan struct{} // one token: "the heap changed"
	done  chan struct{} // closed by Close
}

// NewQueue returns an empty queue.
func NewQueue(cfg QueueConfig) *Queue {
	if cfg.Capacity < 1 {
		cfg.Capacity = 1
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.MaxHolds <= 0 {
		cfg.MaxHolds = 1024
	}
	return &Queue{cfg: cfg, items: map[Key]*item{}, holds: map[string]time.Time{}, wake: make(chan struct{}, 1), done: make(chan struct{})}
}

func (q *Queue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// Add records a change of key. It never blocks.
func (q *Queue) Add(key Key) AddResult {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return AddResult{Closed: true}
	}
	now := q.cfg.Clock.Now()
	if key.Control != ControlNone {
		return q.addControl(key, now)
	}
	if it, ok := q.items[key]; ok {
		switch it.state {
		case statePending:
			it.changed = now
			return AddResult{Coalesced: true}
		case stateInflight:
			if !it.dirty {
				it.dirty, it.dirtyAt = true, now
				q.dirty++
			}
			it.changed = now
			return AddResult{Coalesced: true}
		case stateCooling: // a new change: pending until the interval ends
			q.cooling.Remove(it.elem)
			dropped := q.makeRoom()
			it.state, it.since, it.changed, it.attempts = statePending, now, now, 0
			it.elem = q.pending.PushBack(it)
			return AddResult{Dropped: dropped}
		}
	}
	dropped := q.makeRoom()
	q.seq++
	it := &item{key: key, state: statePending, since: now, changed: now, due: now, seq: q.seq, index: -1}
	it.elem = q.pending.PushBack(it)
	q.items[key] = it
	heap.Push(&q.heap, it)
	q.signal()
	return AddResult{Dropped: dropped}
}

// addControl records a resync or heartbeat request: due at once, never
// dropped for room, coalesced with one already pending or in flight.
func (q *Queue) addControl(key Key, now time.Time) AddResult {
	if it, ok := q.items[key]; ok {
		if it.state == stateInflight && !it.dirty {
			it.dirty, it.dirtyAt = true, now
			q.dirty++
		}
		it.changed = now
		return AddResult{Coalesced: true}
	}
	q.seq++
	it := &item{key: key, state: statePending, since: now, changed: now, due: now, seq: q.seq, index: -1}
	q.items[key] = it
	heap.Push(&q.ctrl, it)
	q.signal()
	return AddResult{}
}

// makeRoom drops the oldest pending entries until one more fits.
func (q *Queue) makeRoom() []Key {
	var dropped []Key
	for q.pending.Len() >= q.cfg.Capacity {
		it := q.pending.Front().Value.(*item)
		q.remove(it)
		dropped = append(dropped, it.key)
	}
	return dropped
}

// remove deletes a pending or cooling item everywhere.
func (q *Queue) remove(it *item) {
	if it.key.Control != ControlNone {
		if it.index >= 0 {
			heap.Remove(&q.ctrl, it.index)
		}
		delete(q.items, it.key)
		return
	}
	switch it.state {
	case statePending:
		q.pending.Remove(it.elem)
	case stateCooling:
		q.cooling.Remove(it.elem)
	}
	if it.index >= 0 {
		heap.Remove(&q.heap, it.index)
	}
	delete(q.items, it.key)
}

// forget deletes an item that has ended (its lease is over).
func (q *Queue) forget(it *item) {
	delete(q.items, it.key)
	q.checkIdle()
}

// checkIdle wakes WaitIdle when nothing is owed or in flight.
func (q *Queue) checkIdle() {
	if q.idle != nil && q.flight == 0 && q.pending.Len() == 0 && len(q.ctrl) == 0 {
		close(q.idle)
		q.idle = nil
	}
}

// Get waits for a pending item whose due time has come and hands it out. It
// returns false when ctx ends, or when the queue is closed and nothing is
// pending any more.
func (q *Queue) Get(ctx context.Context) (*Lease, bool) {
	var timer clock.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil, false
		}
		l, wait, finished := q.tryGet()
		if l != nil {
			return l, true
		}
		if finished {
			return nil, false
		}

		var fire <-chan time.Time
		if wait >= 0 {
			if timer == nil {
				timer = q.cfg.Clock.NewTimer(wait)
			} else {
				timer.Reset(wait)
			}
			fire = timer.C()
		}
		var done <-chan struct{}
		if !q.isClosed() {
			done = q.done
		}
		select {
		case <-ctx.Done():
			return nil, false
		case <-q.wake:
		case <-done:
		case <-fire:
		}
	}
}

// tryGet hands out a due item, or says how long until the next one is due
// (-1: nothing scheduled) and whether the queue is closed and empty.
func (q *Queue) tryGet() (l *Lease, wait time.Duration, finished bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Clock.Now()
	for len(q.ctrl) > 0 && !q.ctrl[0].due.After(now) {
		if q.postpone(&q.ctrl, now) {
			continue
		}
		it := heap.Pop(&q.ctrl).(*item)
		return q.lease(it, now), 0, false
	}
	for len(q.heap) > 0 && !q.heap[0].due.After(now) {
		if q.heap[0].state == stateCooling {
			it := heap.Pop(&q.heap).(*item)
			q.cooling.Remove(it.elem)
			delete(q.items, it.key)
			continue
		}
		if q.postpone(&q.heap, now) {
			continue
		}
		it := heap.Pop(&q.heap).(*item)
		q.pending.Remove(it.elem)
		it.elem = nil
		return q.lease(it, now), 0, false
	}
	if q.closed && q.pending.Len() == 0 && len(q.ctrl) == 0 {
		return nil, 0, true
	}
	var next *item
	for _, h := range []itemHeap{q.heap, q.ctrl} {
		if len(h) > 0 && (next == nil || h[0].due.Before(next.due)) {
			next = h[0]
		}
	}
	if next == nil {
		return nil, -1, false
	}
	return nil, next.due.Sub(now), false
}

// Hold makes every delivery of manager wait until until (a Retry-After of
// the KCP for it): pending ones, retries and new ones alike, resyncs and
// heartbeats too; other managers are not affected. A later hold extends an
// earlier one, never shortens it. Changes keep coalescing meanwhile and
// still count against the capacity, so a held manager's changes end in a
// delivery or, when the queue needs room, in an overflow resync. At most
// MaxHolds managers are held at once; Hold reports false (no hold) beyond
// that, when the retry's own backoff still applies.
func (q *Queue) Hold(manager string, until time.Time) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Clock.Now()
	if !until.After(now) {
		return true
	}
	if prev, ok := q.holds[manager]; ok {
		if until.After(prev) {
			q.holds[manager] = until
		}
		return true
	}
	if len(q.holds) >= q.cfg.MaxHolds {
		for m, t := range q.holds {
			if !t.After(now) {
				delete(q.holds, m)
			}
		}
		if len(q.holds) >= q.cfg.MaxHolds {
			return false
		}
	}
	q.holds[manager] = until
	return true
}

// HeldUntil is when manager's hold ends (zero when it is not held).
func (q *Queue) HeldUntil(manager string) time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	if t, ok := q.holds[manager]; ok && t.After(q.cfg.Clock.Now()) {
		return t
	}
	return time.Time{}
}

// postpone moves the due top item of h to the end of its manager's hold,
// when the manager is held; it reports whether it did. An ended hold is
// forgotten. q.mu is held.
func (q *Queue) postpone(h *itemHeap, now time.Time) bool {
	if len(q.holds) == 0 {
		return false
	}
	it := (*h)[0]
	until, ok := q.holds[it.key.Manager]
	if !ok {
		return false
	}
	if !until.After(now) {
		delete(q.holds, it.key.Manager)
		return false
	}
	it.due = until
	heap.Fix(h, 0)
	return true
}

// lease hands out an item taken from its heap.
func (q *Queue) lease(it *item, now time.Time) *Lease {
	it.state = stateInflight
	it.attempts++
	q.flight++
	if (len(q.heap) > 0 && !q.heap[0].due.After(now)) || (len(q.ctrl) > 0 && !q.ctrl[0].due.After(now)) {
		q.signal() // more is due: wake another worker
	}
	return &Lease{Key: it.key, Attempt: it.attempts, Since: it.since, Start: now, it: it}
}

func (q *Queue) isClosed() bool {
	select {
	case <-q.done:
		return true
	default:
		return false
	}
}

// Delivered ends a lease after a successful delivery. A change that came in
// meanwhile is delivered again once the per-object interval has passed;
// entries dropped to make room for it are returned.
func (q *Queue) Delivered(l *Lease) (dropped []Key) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := l.it
	q.flight--
	now := q.cfg.Clock.Now()
	next := l.Start.Add(q.cfg.Interval)
	it.attempts = 0
	if it.key.Control != ControlNone {
		next = now // control keys do not cool
	}
	if it.dirty {
		q.clearDirty(it)
		it.since = it.dirtyAt
		return q.requeue(it, maxTime(now, next))
	}
	if q.cfg.Interval <= 0 || !next.After(now) || q.closed {
		q.forget(it)
		return nil
	}
	if q.cooling.Len() >= q.cfg.Capacity { // forget the oldest interval
		q.remove(q.cooling.Front().Value.(*item))
	}
	it.state, it.due = stateCooling, next
	q.seq++
	it.seq = q.seq
	it.elem = q.cooling.PushBack(it)
	heap.Push(&q.heap, it)
	q.checkIdle()
	return nil
}

// Retry ends a failed lease: the item is due again at the given time, or,
// when its newest change (also one that came while in flight) is before
// expireBefore (zero: never), it is dropped and Retry reports false — in one
// step, so a change cannot slip in between. The caller decides both
// (Dispatcher.settle). Entries dropped to make room are returned.
func (q *Queue) Retry(l *Lease, at, expireBefore time.Time) (requeued bool, dropped []Key) {
	q.mu.Lock()
	defer q.mu.Unlock()
	it := l.it
	q.flight--
	q.clearDirty(it)
	if !expireBefore.IsZero() && it.changed.Before(expireBefore) {
		q.forget(it)
		return false, nil
	}
	return true, q.requeue(it, at)
}

// Drop ends a lease without delivery (the KCP rejected it).
func (q *Queue) Drop(l *Lease) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.flight--
	q.clearDirty(l.it)
	q.forget(l.it)
}

func (q *Queue) clearDirty(it *item) {
	if it.dirty {
		it.dirty = false
		q.dirty--
	}
}

func (q *Queue) requeue(it *item, due time.Time) []Key {
	if it.key.Control != ControlNone {
		it.state, it.due = statePending, due
		q.seq++
		it.seq = q.seq
		heap.Push(&q.ctrl, it)
		q.signal()
		return nil
	}
	dropped := q.makeRoom()
	it.state, it.due = statePending, due
	q.seq++
	it.seq = q.seq
	it.elem = q.pending.PushBack(it)
	heap.Push(&q.heap, it)
	q.signal()
	return dropped
}

// Close stops taking changes. Get keeps handing out what is pending.
func (q *Queue) Close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// DropPending removes every pending entry and returns their keys.
func (q *Queue) DropPending() []Key {
	q.mu.Lock()
	defer q.mu.Unlock()
	var keys []Key
	for q.pending.Len() > 0 {
		it := q.pending.Front().Value.(*item)
		q.remove(it)
		keys = append(keys, it.key)
	}
	for len(q.ctrl) > 0 {
		it := q.ctrl[0]
		q.remove(it)
		keys = append(keys, it.key)
	}
	q.checkIdle()
	return keys
}

// ForgetManager removes every pending entry of manager (a manager that is
// gone) and returns their keys, objects and control keys alike. Keys in
// flight end with their leases.
func (q *Queue) ForgetManager(manager string) []Key {
	q.mu.Lock()
	defer q.mu.Unlock()
	var keys []Key
	for k, it := range q.items {
		if k.Manager == manager && it.state == statePending {
			q.remove(it)
			keys = append(keys, k)
		}
	}
	q.checkIdle()
	return keys
}

// Forget removes a pending key (a manager that is gone); it reports whether
// the key was pending. A key in flight ends with its lease.
func (q *Queue) Forget(key Key) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	it, ok := q.items[key]
	if !ok || it.state != statePending {
		return false
	}
	q.remove(it)
	q.checkIdle()
	return true
}

// Expedite makes every pending entry due now (retries waiting for their
// backoff included): used when draining before shutdown. A held manager's
// entries still wait for the end of its hold.
func (q *Queue) Expedite() {
	q.mu.Lock()
	defer q.mu.Unlock()
	now := q.cfg.Clock.Now()
	for _, h := range []*itemHeap{&q.heap, &q.ctrl} {
		for _, it := range *h {
			if it.state == statePending && it.due.After(now) {
				it.due = now
			}
		}
		heap.Init(h)
	}
	q.signal()
}

// WaitIdle waits until nothing is pending or in flight, or ctx ends.
func (q *Queue) WaitIdle(ctx context.Context) error {
	q.mu.Lock()
	if q.flight == 0 && q.pending.Len() == 0 && len(q.ctrl) == 0 {
		q.mu.Unlock()
		return nil
	}
	if q.idle == nil {
		q.idle = make(chan struct{})
	}
	idle := q.idle
	q.mu.Unlock()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Depth is the number of deliveries still owed: pending entries (control
// keys included) plus in-flight ones changed meanwhile.
func (q *Queue) Depth() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.depthLocked()
}

func (q *Queue) depthLocked() int { return q.pending.Len() + len(q.ctrl) + q.dirty }

// OldestPending is the oldest undelivered change among the deliveries
// owed, in flight included (zero when none is owed).
func (q *Queue) OldestPending() time.Time {
	q.mu.Lock()
	defer q.mu.Unlock()
	var oldest time.Time
	for _, it := range q.items {
		if it.state != statePending && it.state != stateInflight {
			continue
		}
		if t := it.since; oldest.IsZero() || t.Before(oldest) {
			oldest = t
		}
	}
	return oldest
}

// Len is the number of entries held, in any state (for memory accounting).
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.items)
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// itemHeap orders items by due time, then by sequence.
type itemHeap []*item

func (h itemHeap) Len() int { return len(h) }
func (h itemHeap) Less(i, j int) bool {
	if !h[i].due.Equal(h[j].due) {
		return h[i].due.Before(h[j].due)
	}
	return h[i].seq < h[j].seq
}
func (h itemHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index = i
	h[j].index = j
}
func (h *itemHeap) Push(x any) {
	it := x.(*item)
	it.index = len(*h)
	*h = append(*h, it)
}
func (h *itemHeap) Pop() any {
	old := *h
	n := len(old)
	it := old[n-1]
	old[n-1] = nil
	it.index = -1
	*h = old[:n-1]
	return it
}
