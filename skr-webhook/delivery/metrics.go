package delivery

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

type metrics struct {
	accepted         prometheus.Counter
	coalesced        prometheus.Counter
	delivered        prometheus.Counter
	retried          prometheus.Counter
	dropped          *prometheus.CounterVec
	latency          prometheus.Histogram
	attemptDuration  *prometheus.HistogramVec
	attempts         *prometheus.CounterVec
	resyncsRequested *prometheus.CounterVec
	resyncsSent      *prometheus.CounterVec
	heartbeatsSent   prometheus.Counter
	heartbeatsFailed prometheus.Counter
	managersRefused  prometheus.Counter
	held             prometheus.Counter
	// tlsFailures: attempts that failed in the TLS handshake (tlsfailure.go).
	tlsFailures prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, d *Dispatcher) *metrics {
	m := &metrics{
		accepted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_accepted_total",
			Help: "Change events taken into the delivery queue (enqueued, coalesced ones included).",
		}),
		coalesced: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_coalesced_total",
			Help: "Events merged into a delivery already pending or in flight for the same object.",
		}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_delivered_total",
			Help: "Change events the KCP answered with 2xx.",
		}),
		retried: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_event_retries_total",
			Help: "Failed delivery attempts (transport error or a status other than 2xx, 400, 413, 415, 422) scheduled for a retry.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_events_dropped_total",
			Help: "Events given up, by reason: overflow (queue full, oldest dropped; overflow resync requested), expired (maximum retry age; expired resync requested), shutdown (covered by the next startup resync), bad_request/too_large/unsupported_media_type/unprocessable (KCP answered 400/413/415/422), invalid (could not be sent).",
		}, []string{"reason"}),
		latency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "runtime_watcher_skr_webhook_delivery_latency_seconds",
			Help:    "Time from the oldest undelivered change of an object to its successful delivery.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		attemptDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "runtime_watcher_skr_webhook_delivery_attempt_duration_seconds",
			Help:    "Duration of single delivery attempts by outcome (delivered, retry, rejected).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"outcome"}),
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_delivery_attempts_total",
			Help: "Delivery attempts (events, resyncs, heartbeats) by result class: 2xx, 3xx, 400, 403, 404, 408, 413, 415, 422, 425, 429, 4xx (other), 5xx, transport, invalid.",
		}, []string{"result"}),
		resyncsRequested: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_resyncs_requested_total",
			Help: "Resyncs requested by reason (startup, overflow, expired); requests coalesce into at most one pending per manager.",
		}, []string{"reason"}),
		resyncsSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_resyncs_sent_total",
			Help: "Resync events the KCP answered with 2xx, by reason.",
		}, []string{"reason"}),
		heartbeatsSent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_heartbeats_sent_total",
			Help: "Heartbeats the KCP answered with 2xx.",
		}),
		heartbeatsFailed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_heartbeats_failed_total",
			Help: "Heartbeat attempts that failed (retried, or dropped on 400/413/415/422).",
		}),
		managersRefused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_managers_refused_total",
			Help: "Managers not made known because the bound of known managers was reached (they get no resyncs or heartbeats).",
		}),
		held: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_manager_holds_total",
			Help: "Answers 429 or 503 with Retry-After that held all deliveries of their manager until then (ext-authz's rate limit per runtime, a listener replica that cannot hand events on).",
		}),
		tlsFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_tls_failures_total",
			Help: "Delivery attempts that failed in the TLS handshake (an untrusted gateway certificate, or the gateway refused the client certificate); they are retried.",
		}),
	}
	for _, r := range dropReasons {
		m.dropped.WithLabelValues(r) // export zeros
	}
	for _, r := range contract.ResyncReasons {
		m.resyncsRequested.WithLabelValues(string(r))
		m.resyncsSent.WithLabelValues(string(r))
	}
	for _, r := range resultClasses {
		m.attempts.WithLabelValues(r)
	}
	if reg != nil {
		q := d.queue
		reg.MustRegister(m.accepted, m.coalesced, m.delivered, m.retried, m.dropped, m.latency, m.attemptDuration,
			m.attempts, m.resyncsRequested, m.resyncsSent, m.heartbeatsSent, m.heartbeatsFailed, m.managersRefused, m.held, m.tlsFailures,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "runtime_watcher_skr_webhook_queue_depth",
				Help: "Deliveries owed: pending entries (new or waiting to retry, resyncs and heartbeats included) plus in-flight ones changed meanwhile.",
			}, func() float64 { return float64(q.Depth()) }),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "runtime_watcher_skr_webhook_queue_oldest_pending_age_seconds",
				Help: "Age of the oldest undelivered change among the deliveries owed (0 when none).",
			}, func() float64 {
				t := q.OldestPending()
				if t.IsZero() {
					return 0
				}
				return max(0, d.clock.Since(t).Seconds())
			}),
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{
				Name: "runtime_watcher_skr_webhook_managers",
				Help: "Managers known (managers file and admission paths): each gets a startup resync and heartbeats.",
			}, func() float64 { return float64(len(d.Managers())) }),
		)
	}
	return m
}
