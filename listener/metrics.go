package listener

import (
	"errors"
	"net/http"
	"slices"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// Metric names. Every metric carries the constant label manager.
const (
	MetricRequests        = "runtime_watcher_listener_requests_total"
	MetricEventsDelivered = "runtime_watcher_listener_events_delivered_total"
	MetricBufferDepth     = "runtime_watcher_listener_buffer_depth"
	MetricBufferCapacity  = "runtime_watcher_listener_buffer_capacity"
	// MetricResyncs counts accepted resync events by reason (startup,
	// overflow, expired; "other" for a reason this version does not know).
	MetricResyncs = "runtime_watcher_listener_resyncs_total"
	// MetricHeartbeats counts accepted heartbeats (never put on the channel).
	MetricHeartbeats = "runtime_watcher_listener_heartbeats_total"
	// MetricLastSeen is the Unix time of the last accepted event per
	// runtime_id (see LastSeen for the bounds of the label).
	MetricLastSeen          = "runtime_watcher_listener_last_seen_timestamp_seconds"
	MetricLastSeenRuntimes  = "runtime_watcher_listener_last_seen_runtimes"
	MetricLastSeenEvicted   = "runtime_watcher_listener_last_seen_evicted_total"
	MetricConsumerRunning   = "runtime_watcher_listener_consumer_running"
	MetricNoConsumerRefused = "runtime_watcher_listener_no_consumer_refused_total"
	// MetricNotOwnerRefused counts events answered 503 because another
	// replica owns their runtime (WithOwner).
	MetricNotOwnerRefused = "runtime_watcher_listener_not_owner_refused_total"
	// MetricSignatureRefused counts requests refused because ext-authz's
	// identity signature was missing, malformed, expired, made with an
	// unknown key or not over this request (WithIdentityKeyFile), by
	// reason.
	MetricSignatureRefused = "runtime_watcher_listener_identity_signature_refused_total"
	// MetricSignatureVerified is 1 when the listener verifies the identity
	// signature (WithIdentityKeyFile), else 0.
	MetricSignatureVerified = "runtime_watcher_listener_identity_signature_verified"
)

// otherResync is the reason label value of MetricResyncs for a reason this
// version does not know; the others are contract.ResyncReasons.
const otherResync = "other"

// knownCodes are the statuses the handler answers; their counters are
// created up front so every series exists from the start.
var knownCodes = []int{
	http.StatusOK, http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
	http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusRequestEntityTooLarge,
	http.StatusServiceUnavailable,
}

type metrics struct {
	requests  *prometheus.CounterVec
	byCode    map[int]prometheus.Counter
	delivered prometheus.Counter

	resyncs         *prometheus.CounterVec
	heartbeats      prometheus.Counter
	evicted         prometheus.Counter
	consumerRunning prometheus.Gauge
	noConsumer      prometheus.Counter
	notOwner        prometheus.Counter
	sigRefused      map[contract.DenyReason]prometheus.Counter
	sigVerified     prometheus.Gauge

	collectors []prometheus.Collector
}

// newMetrics creates the metrics; register registers them.
func newMetrics(managerName string, events chan event.GenericEvent) *metrics {
	labels := prometheus.Labels{"manager": managerName}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "Event requests answered by the listener, by HTTP status code.", ConstLabels: labels,
		}, []string{"code"}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricEventsDelivered, Help: "Events put on the listener's channel.", ConstLabels: labels,
		}),
		byCode: make(map[int]prometheus.Counter, len(knownCodes)),
		resyncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricResyncs, Help: "Resync events accepted (put on the channel), by reason.", ConstLabels: labels,
		}, []string{"reason"}),
		heartbeats: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricHeartbeats, Help: "Heartbeats accepted (recorded as last-seen, never put on the channel).", ConstLabels: labels,
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLastSeenEvicted, Help: "Runtimes whose last-seen time was dropped because the limit of runtimes was reached.", ConstLabels: labels,
		}),
		consumerRunning: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricConsumerRunning, Help: "1 while this replica hands events to a running consumer (the leader), else 0.", ConstLabels: labels,
		}),
		noConsumer: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricNoConsumerRefused, Help: "Events answered 503 because no consumer runs on this replica (not the leader).", ConstLabels: labels,
		}),
		notOwner: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricNotOwnerRefused, Help: "Events answered 503 because another replica owns their runtime (shards).", ConstLabels: labels,
		}),
	}
	for _, r := range contract.ResyncReasons {
		m.resyncs.WithLabelValues(string(r))
	}
	sigRefused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricSignatureRefused, Help: "Requests refused because the identity signature of ext-authz did not verify, by reason.", ConstLabels: labels,
	}, []string{"reason"})
	m.sigRefused = make(map[contract.DenyReason]prometheus.Counter, len(assertion.Reasons))
	for _, r := range assertion.Reasons {
		m.sigRefused[r] = sigRefused.WithLabelValues(string(r))
	}
	m.sigVerified = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: MetricSignatureVerified, Help: "1 when the listener verifies the identity signature of ext-authz, else 0.", ConstLabels: labels,
	})
	m.resyncs.WithLabelValues(otherResync)
	for _, c := range knownCodes {
		m.byCode[c] = m.requests.WithLabelValues(strconv.Itoa(c))
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricBufferDepth, Help: "Events waiting in the listener's buffer.", ConstLabels: labels,
	}, func() float64 { return float64(len(events)) })
	capacity := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricBufferCapacity, Help: "Capacity of the listener's event buffer.", ConstLabels: labels,
	}, func() float64 { return float64(cap(events)) })
	m.collectors = []prometheus.Collector{m.requests, m.delivered, depth, capacity, m.resyncs, m.heartbeats, m.evicted, m.consumerRunning, m.noConsumer, m.notOwner, sigRefused, m.sigVerified}
	return m
}

// register registers the metrics and extra collectors with reg (nil: none).
func (m *metrics) register(managerName string, reg prometheus.Registerer, extra ...prometheus.Collector) error {
	if reg == nil {
		return nil
	}
	for _, c := range append(m.collectors, extra...) {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return errors.New("metrics of a listener for manager " + managerName + " are already registered; use one listener per manager or WithRegisterer")
			}
			return err
		}
	}
	return nil
}

func (m *metrics) request(code int) {
	if c, ok := m.byCode[code]; ok {
		c.Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}

func (m *metrics) resync(reason string) {
	if slices.Contains(contract.ResyncReasons, contract.ResyncReason(reason)) {
		m.resyncs.WithLabelValues(reason).Inc()
		return
	}
	m.resyncs.WithLabelValues(otherResync).Inc()
}

// signatureRefused counts a refused identity signature.
func (m *metrics) signatureRefused(r contract.DenyReason) {
	if c, ok := m.sigRefused[r]; ok {
		c.Inc()
	}
}
