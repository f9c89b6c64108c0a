package listener

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/event"
)

// Metric names. Every metric carries the constant label manager.
const (
	MetricRequests        = "runtime_watcher_listener_requests_total"
	MetricEventsDelivered = "runtime_watcher_listener_events_delivered_total"
	MetricBufferDepth     = "runtime_watcher_listener_buffer_depth"
	MetricBufferCapacity  = "runtime_watcher_listener_buffer_capacity"
)

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
}

func newMetrics(managerName string, events chan event.GenericEvent, reg prometheus.Registerer) (*metrics, error) {
	labels := prometheus.Labels{"manager": managerName}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricRequests, Help: "Event requests answered by the listener, by HTTP status code.", ConstLabels: labels,
		}, []string{"code"}),
		delivered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricEventsDelivered, Help: "Events put on the listener's channel.", ConstLabels: labels,
		}),
		byCode: make(map[int]prometheus.Counter, len(knownCodes)),
	}
	for _, c := range knownCodes {
		m.byCode[c] = m.requests.WithLabelValues(strconv.Itoa(c))
	}
	depth := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricBufferDepth, Help: "Events waiting in the listener's buffer.", ConstLabels: labels,
	}, func() float64 { return float64(len(events)) })
	capacity := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: MetricBufferCapacity, Help: "Capacity of the listener's event buffer.", ConstLabels: labels,
	}, func() float64 { return float64(cap(events)) })
	if reg == nil {
		return m, nil
	}
	for _, c := range []prometheus.Collector{m.requests, m.delivered, depth, capacity} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, errors.New("metrics of a listener for manager " + managerName + " are already registered; use one listener per manager or WithRegisterer")
			}
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) request(code int) {
	if c, ok := m.byCode[code]; ok {
		c.Inc()
		return
	}
	m.requests.WithLabelValues(strconv.Itoa(code)).Inc()
}
