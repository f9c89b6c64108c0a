package listener

import (
	"sync"
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

type lastSeen struct {
	mu        sync.Mutex
	at        map[string]time.Time
	limit     int
	retention time.Duration
	now       func() time.Time
	evicted   prometheus.Counter
}

func newLastSeen(limit int, retention time.Duration, now func() time.Time, evicted prometheus.Counter) *lastSeen {
	return &lastSeen{at: map[string]time.Time{}, limit: limit, retention: retention, now: now, evicted: evicted}
}

func (s *lastSeen) touch(runtimeID string) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, known := s.at[runtimeID]; !known && len(s.at) >= s.limit {
		s.forgetLocked(now)
		if len(s.at) >= s.limit {
			s.evictOldestLocked()
		}
	}
	s.at[runtimeID] = now
}

func (s *lastSeen) get(runtimeID string) (time.Time, bool) {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.at[runtimeID]
	if ok && now.Sub(t) > s.retention {
		delete(s.at, runtimeID)
		return time.Time{}, false
	}
	return t, ok
}

// snapshot forgets expired runtimes and returns a copy of the rest.
func (s *lastSeen) snapshot() map[string]time.Time {
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.forgetLocked(now)
	out := make(map[string]time.Time, len(s.at))
	for k, v := range s.at {
		out[k] = v
	}
	return out
}

func (s *lastSeen) forgetLocked(now time.Time) {
	for id, t := range s.at {
		if now.Sub(t) > s.retention {
			delete(s.at, id)
		}
	}
}

// evictOldestLocked is O(n); it runs only when a new runtime arrives at the
// limit.
func (s *lastSeen) evictOldestLocked() {
	var oldestID string
	var oldest time.Time
	for id, t := range s.at {
		if oldestID == "" || t.Before(oldest) {
			oldestID, oldest = id, t
		}
	}
	if oldestID != "" {
		delete(s.at, oldestID)
		s.evicted.Inc()
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
