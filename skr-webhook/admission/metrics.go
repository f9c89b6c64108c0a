package admission

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// MaxManagerLabels bounds the distinct manager label values; any path can
// name a manager, so later ones are counted as "_other".
const MaxManagerLabels = 64

// Label values for requests without a (valid) manager or past the bound.
const (
	managerInvalid = "_invalid"
	managerOther   = "_other"
)

// Metrics counts admission requests by manager, operation and result.
type Metrics struct {
	requests *prometheus.CounterVec
	duration prometheus.Histogram

	mu       sync.Mutex
	managers map[string]struct{}
}

// NewMetrics registers the admission metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_admission_requests_total",
			Help: "Admission requests by manager, operation and result (emitted, unchanged, dry_run, connect, other_subresource, overflow, bad_request, too_large, not_found, method_not_allowed).",
		}, []string{"manager", "operation", "result"}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runtime_watcher_skr_webhook_admission_duration_seconds",
			Help:    "Time from receiving an admission request to answering it.",
			Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5, 1},
		}),
		managers: map[string]struct{}{},
	}
	reg.MustRegister(m.requests, m.duration)
	return m
}

func (m *Metrics) observe(manager, op, result string, start time.Time) {
	if m == nil {
		return
	}
	m.requests.WithLabelValues(m.managerLabel(manager), op, result).Inc()
	m.duration.Observe(time.Since(start).Seconds())
}

func (m *Metrics) managerLabel(manager string) string {
	if manager == "" {
		return managerInvalid
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.managers[manager]; ok {
		return manager
	}
	if len(m.managers) >= MaxManagerLabels {
		return managerOther
	}
	m.managers[manager] = struct{}{}
	return manager
}
