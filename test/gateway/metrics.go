package gateway

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics count the stand-in's decisions: xDS updates accepted or refused,
// stream (re)connections, ext_authz outcomes, request outcomes, TLS
// connections without a filter chain and the version and cipher suite of
// each downstream handshake (Envoy's listener ssl.versions and ssl.ciphers
// statistics).
type metrics struct {
	updates     *prometheus.CounterVec
	streams     *prometheus.CounterVec
	authz       *prometheus.CounterVec
	requests    *prometheus.CounterVec
	connections *prometheus.CounterVec
	handshakes  *prometheus.CounterVec
}

func newMetrics() *metrics {
	return &metrics{
		updates: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_xds_updates_total",
			Help: "xDS responses from istiod by type (CDS, EDS, LDS, RDS) and result: ack (applied) or nack (refused: an unimplemented feature or an invalid resource)."},
			[]string{"type", "result"}),
		streams: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_xds_streams_total",
			Help: "ADS streams to istiod: opened, broken."}, []string{"event"}),
		authz: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_ext_authz_total",
			Help: "ext_authz filter outcomes: allowed, denied, error (status_on_error answered), error_allowed (failure_mode_allow), skipped (not enabled by filter_enabled_metadata)."},
			[]string{"result"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_requests_total",
			Help: "Router outcomes: routed, retry, no_route, direct_response, upstream_failure, too_large, no_filter_chain, upgrade_refused (WebSocket upgrades are not implemented)."},
			[]string{"result"}),
		connections: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_connections_refused_total",
			Help: "TLS connections refused before a request: no_filter_chain (no chain matches the SNI)."},
			[]string{"reason"}),
		handshakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "gateway_downstream_tls_handshakes_total",
			Help: "Downstream TLS handshakes that passed certificate verification, by protocol version (\"TLS 1.3\") and cipher suite (Go's name), as Envoy's listener ssl.versions and ssl.ciphers statistics."},
			[]string{"version", "cipher"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	var errs []error
	for _, c := range []prometheus.Collector{m.updates, m.streams, m.authz, m.requests, m.connections, m.handshakes} {
		errs = append(errs, r.Register(c))
	}
	return errors.Join(errs...)
}
