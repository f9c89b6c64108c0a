package runtimes

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	outcomes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vs_controller_runtime_reconciles_total",
		Help: "Runtime reconciles that reached the SKR, by outcome: applied, unchanged, unreachable, failed, invalid-kubeconfig, removed.",
	}, []string{"result"})
	writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "vs_controller_runtime_writes_total",
		Help: "Write requests the runtime reconciler issued (KCP and SKR), by kind of write.",
	}, []string{"kind"})
)

func init() { metrics.Registry.MustRegister(outcomes, writes) }

func recordWrite(kind string) { writes.WithLabelValues(kind).Inc() }
