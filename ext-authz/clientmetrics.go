package main

import (
	"context"

	"github.com/prometheus/client_golang/prometheus"
	clientmetrics "k8s.io/client-go/tools/metrics"
)

// registerClientMetrics exports client-go's API request results as
// rest_client_requests_total{code,method,host}, the metric
// controller-runtime registers for its clients (without importing
// controller-runtime's metrics package, which links client-go's typed
// clients through leader election).
func registerClientMetrics(reg prometheus.Registerer) error {
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rest_client_requests_total",
		Help: "Number of HTTP requests to the API server, partitioned by status code, method, and host.",
	}, []string{"code", "method", "host"})
	if err := reg.Register(requests); err != nil {
		return err
	}
	clientmetrics.Register(clientmetrics.RegisterOpts{RequestResult: requestResult{requests}})
	return nil
}

type requestResult struct{ c *prometheus.CounterVec }

func (r requestResult) Increment(_ context.Context, code, method, host string) {
	r.c.WithLabelValues(code, method, host).Inc()
}
