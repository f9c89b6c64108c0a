// Package syncmetrics holds module-sync's Prometheus metrics
// (runtime_watcher_module_sync_…), registered with controller-runtime's
// registry: mirror passes and writes, SyncResource reconciles and items,
// requests to runtimes, listener events.
package syncmetrics

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Metric name parts: every metric of module-sync is runtime_watcher_module_sync_….
const (
	MetricsNamespace = "runtime_watcher"
	MetricsSubsystem = "module_sync"
)

var (
	// MirrorPasses counts mirror passes (one runtime's Module CRs into its
	// ModuleConfigs) by result: synced, unchanged, removed, no-kubeconfig,
	// failed.
	MirrorPasses = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "mirror_passes_total",
		Help: "Mirror passes (a runtime's Module CRs into ModuleConfigs) by result: synced, unchanged, removed, no-kubeconfig, failed, runtime-busy (another pass of the runtime runs; requeued).",
	}, []string{"result"})
	// MirrorWrites counts ModuleConfig writes by operation: created, updated, deleted.
	MirrorWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "mirror_writes_total",
		Help: "ModuleConfig writes by operation: created, updated, deleted.",
	}, []string{"operation"})
	// SyncReconciles counts SyncResource reconciles by result: applied,
	// retry (an item or the runtime failed for a reason that may pass;
	// requeued with backoff), failed (waits for a change or the drift
	// pass), cleaned-up, no-runtime.
	SyncReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "syncresource_reconciles_total",
		Help: "SyncResource reconciles by result: applied, retry, failed, cleaned-up, no-runtime, runtime-busy (another pass of the runtime runs; requeued).",
	}, []string{"result"})
	// SyncItems counts applied items by their state: Ready, Error, Refused.
	SyncItems = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "syncresource_items_total",
		Help: "SyncResource items processed, by resulting state: Ready, Error, Refused.",
	}, []string{"state"})
	// SKRRequests counts the requests sent to runtimes' API servers, by
	// HTTP method (for requests per runtime per pass).
	SKRRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "skr_requests_total",
		Help: "Requests sent to runtimes' API servers, by HTTP method.",
	}, []string{"method"})
	// SKRRequestDuration: how long runtimes' API servers took to answer,
	// by HTTP method.
	SKRRequestDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "skr_request_duration_seconds",
		Help:    "Time until a runtime's API server answered a request (headers), by HTTP method.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"method"})
	// Events counts listener events by outcome: enqueued, unknown-runtime, lookup-failed.
	Events = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "events_total",
		Help: "Watcher events received, by outcome: enqueued, unknown-runtime, lookup-failed.",
	}, []string{"outcome"})
	// EventLatency: how long after the listener handed an event over the
	// mirror pass that read the runtime for it began (stage "queued":
	// the controller's queue and a wait for the runtime's turn) and ended
	// (stage "mirrored": its ModuleConfigs written). Events of one runtime
	// that arrive before its pass began count once, from the first.
	EventLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: MetricsNamespace, Subsystem: MetricsSubsystem, Name: "event_latency_seconds",
		Help:    "Time from the listener's hand-over of an event to the start (stage=queued) and the end (stage=mirrored) of the mirror pass that read the runtime for it.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"stage"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(MirrorPasses, MirrorWrites, SyncReconciles, SyncItems, SKRRequests, SKRRequestDuration, Events, EventLatency)
}

// CountRequests wraps a runtime client's transport to count its requests
// (SKRRequests) and time them (SKRRequestDuration).
func CountRequests(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		SKRRequests.WithLabelValues(r.Method).Inc()
		began := time.Now()
		resp, err := rt.RoundTrip(r)
		SKRRequestDuration.WithLabelValues(r.Method).Observe(time.Since(began).Seconds())
		return resp, err
	})
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
