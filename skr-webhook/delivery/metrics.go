package delivery

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	emitted   prometheus.Counter
	coalesced prometheus.Counter
	delivered prometheus.Counter
	retried   prometheus.Counter
	dropped   *prometheus.CounterVec
	latency   prometheus.Histogram
	attempts  *prometheus.HistogramVec
	// tlsFailures: attempts that failed in the TLS handshake (tlsfailure.go).
	tlsFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, q *Queue) *metrics {
	m := &metrics{
		emitted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_emitted_total",
			Help: "Events handed to the delivery queue by the admission handler.",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_coalesced_total",
			Help: "Events merged into a delivery already pending or in flight for the same object.",
		}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_delivered_total",
			Help: "Deliveries the KCP answered with 2xx.",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_event_retries_total",
			Help: "Failed delivery attempts (connection error, timeout, 429, 5xx) scheduled for a retry.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_dropped_total",
			Help: "Events given up, by reason: queue_full (oldest dropped), expired (maximum retry age), rejected (4xx), shutdown.",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runtime_watcher_skr_webhook_delivery_latency_seconds",
			Help:    "Time from the oldest undelivered change of an object to its successful delivery.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		attempts: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runtime_watcher_skr_webhook_delivery_attempt_duration_seconds",
			Help:    "Duration of single delivery attempts by outcome (delivered, retry, rejected).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"outcome"}),
		tlsFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_tls_failures_total",
			Help: "Delivery attempts that failed in the TLS handshake (an untrusted gateway certificate, or the gateway refused the client certificate); they are retried.",
		}),
	}
	for _, r := range []string{DropQueueFull, DropExpired, DropRejected, DropShutdown} {
		m.dropped.WithLabelValues(r) // export zeros
	}
	if reg != nil {
		reg.MustRegister(m.emitted, m.coalesced, m.delivered, m.retried, m.dropped, m.latency, m.attempts, m.tlsFailures,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "runtime_watcher_skr_webhook_queue_depth",
				Help: "Deliveries owed: pending entries (new or waiting to retry) plus in-flight ones changed meanwhile.",
			}, func() float64 { return float64(q.Depth()) }))
	}
	return m
}
