package listener

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Last seen (docs/architecture.md §4.8, "Heartbeat"). Every accepted event —
// change, resync or heartbeat — records when its runtime was last heard
// from. A watch path that breaks silently (certificates, network, webhook
// configuration) shows as a runtime whose last-seen time stops advancing
// while its webhook sends a heartbeat every few minutes.
//
// Bounds: runtime IDs are authenticated (only runtimes with a Kyma CR get
// here), but the map and the metric's runtime_id label are bounded anyway.
// A runtime not heard from for the retention (WithLastSeen, default
// DefaultLastSeenRetention) is forgotten — it leaves LastSeen and the
// metric; and at most the limit (default DefaultLastSeenLimit) runtimes are
// kept: a new runtime beyond it evicts the one heard from longest ago
// (counted in runtime_watcher_listener_last_seen_evicted_total).

// Defaults of WithLastSeen.
const (
	DefaultLastSeenRetention = 24 * time.Hour
	DefaultLastSeenLimit     = 50000
)

// lastSeen is read and written on every accepted event, by up to as many
// goroutines as there are connections. Touching a runtime already known is
// lock-free (a sync.Map read and a compare-and-swap on its time): one mutex
// taken per event formed a convoy at 64 concurrent requests (goroutines
// queued on it behind a holder waiting to be scheduled), issue 18. The mutex
// serializes only what changes the set of runtimes: adding one (with the
// limit and eviction), forgetting expired ones, snapshots.
type lastSeen struct {
	entries   sync.Map   // runtime ID → *seenEntry
	mu        sync.Mutex // serializes adding and removing entries
	n         int        // entries, under mu
	limit     int
	retention time.Duration
	now       func() time.Time
	evicted   prometheus.Counter
}

// seenEntry holds a runtime's last-seen time in Unix nanoseconds, or
// removedAt once it left the map: a touch that finds removedAt adds the
// runtime anew instead of writing into an entry nobody reads any more.
type seenEntry struct{ at atomic.Int64 }

const removedAt = math.MinInt64

func newLastSeen(limit int, retention time.Duration, now func() time.Time, evicted prometheus.Counter) *lastSeen {
	return &lastSeen{limit: limit, retention: retention, now: now, evicted: evicted}
}

func (s *lastSeen) touch(runtimeID string) {
	now := s.now().UnixNano()
	if v, ok := s.entries.Load(runtimeID); ok && setUnlessRemoved(v.(*seenEntry), now) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Entries leave the map only under mu: one found now stays.
	if v, ok := s.entries.Load(runtimeID); ok {
		v.(*seenEntry).at.Store(now)
		return
	}
	if s.n >= s.limit {
		s.forgetLocked(now)
		if s.n >= s.limit {
			s.evictOldestLocked()
		}
	}
	e := &seenEntry{}
	e.at.Store(now)
	s.entries.Store(runtimeID, e)
	s.n++
}

// setUnlessRemoved sets e to now unless e was removed from the map.
func setUnlessRemoved(e *seenEntry, now int64) bool {
	for {
		old := e.at.Load()
		if old == removedAt {
			return false
		}
		if e.at.CompareAndSwap(old, now) {
			return true
		}
	}
}

func (s *lastSeen) get(runtimeID string) (time.Time, bool) {
	now := s.now().UnixNano()
	v, ok := s.entries.Load(runtimeID)
	if !ok {
		return time.Time{}, false
	}
	at := v.(*seenEntry).at.Load()
	if at == removedAt {
		return time.Time{}, false
	}
	if s.expired(now, at) {
		s.mu.Lock()
		s.removeLocked(runtimeID, v.(*seenEntry), at)
		s.mu.Unlock()
		return time.Time{}, false
	}
	return time.Unix(0, at), true
}

// snapshot forgets expired runtimes and returns a copy of the rest.
func (s *lastSeen) snapshot() map[string]time.Time {
	now := s.now().UnixNano()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(now)
	out := make(map[string]time.Time, s.n)
	s.entries.Range(func(k, v any) bool {
		if at := v.(*seenEntry).at.Load(); at != removedAt {
			out[k.(string)] = time.Unix(0, at)
		}
		return true
	})
	return out
}

func (s *lastSeen) expired(now, at int64) bool { return time.Duration(now-at) > s.retention }

// removeLocked removes the entry of id if its time is still at (it was not
// touched meanwhile) and reports whether it did.
func (s *lastSeen) removeLocked(id string, e *seenEntry, at int64) bool {
	if !e.at.CompareAndSwap(at, removedAt) {
		return false
	}
	s.entries.Delete(id)
	s.n--
	return true
}

func (s *lastSeen) forgetLocked(now int64) {
	s.entries.Range(func(k, v any) bool {
		e := v.(*seenEntry)
		if at := e.at.Load(); at != removedAt && s.expired(now, at) {
			s.removeLocked(k.(string), e, at)
		}
		return true
	})
}

// evictOldestLocked is O(n); it runs only when a new runtime arrives at the
// limit. A runtime touched while it is chosen is not evicted: the choice is
// made again.
func (s *lastSeen) evictOldestLocked() {
	for {
		var oldestID string
		var oldestE *seenEntry
		var oldest int64
		s.entries.Range(func(k, v any) bool {
			e := v.(*seenEntry)
			if at := e.at.Load(); at != removedAt && (oldestE == nil || at < oldest) {
				oldestID, oldestE, oldest = k.(string), e, at
			}
			return true
		})
		if oldestE == nil {
			return
		}
		if s.removeLocked(oldestID, oldestE, oldest) {
			s.evicted.Inc()
			return
		}
	}
}

// lastSeenCollector exports runtime_watcher_listener_last_seen_timestamp_seconds
// {runtime_id} and _last_seen_runtimes at scrape time.
type lastSeenCollector struct {
	s        *lastSeen
	desc     *prometheus.Desc
	runtimes *prometheus.Desc
}

func newLastSeenCollector(s *lastSeen, labels prometheus.Labels) *lastSeenCollector {
	return &lastSeenCollector{
		s: s,
		desc: prometheus.NewDesc(MetricLastSeen,
			"Unix time the listener last accepted an event (change, resync or heartbeat) of the runtime.",
			[]string{"runtime_id"}, labels),
		runtimes: prometheus.NewDesc(MetricLastSeenRuntimes,
			"Runtimes the listener keeps a last-seen time for.", nil, labels),
	}
}

func (c *lastSeenCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.desc
	ch <- c.runtimes
}

func (c *lastSeenCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.s.snapshot()
	for id, t := range snap {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(t.UnixNano())/1e9, id)
	}
	ch <- prometheus.MustNewConstMetric(c.runtimes, prometheus.GaugeValue, float64(len(snap)))
}

// LastSeen is when this replica last accepted an event (change, resync or
// heartbeat) of the runtime; ok is false when it has none within the
// retention. Events reach the replica that consumes them (the leader), so
// ask the leader — or take the maximum over replicas of the metric.
func (l *Listener) LastSeen(runtimeID string) (time.Time, bool) { return l.seen.get(runtimeID) }

// LastSeenAll returns the last-seen time of every runtime within the
// retention (a copy).
func (l *Listener) LastSeenAll() map[string]time.Time { return l.seen.snapshot() }
