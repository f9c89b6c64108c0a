package routing

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vs_controller_virtualservice_reconciles_total",
		Help: "Watcher reconciles by outcome: applied, unchanged, deleted, apply-failed.",
	}, []string{"result"})
	writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vs_controller_watcher_writes_total",
		Help: "Write requests the Watcher reconciler issued, by kind of write.",
	}, []string{"kind"})
)

func init() { metrics.Registry.MustRegister(decisions, writes) }

func recordWrite(kind string) { writes.WithLabelValues(kind).Inc() }
