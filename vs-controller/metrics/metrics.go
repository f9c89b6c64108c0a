// Package metrics holds vs-controller's own Prometheus metrics, all named
// runtime_watcher_vs_controller_…, registered with controller-runtime's
// registry (served on --metrics-bind-address next to controller-runtime's
// own metrics). The reconcilers count into them; tests read them back with
// prometheus/testutil.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	// Namespace and Subsystem prefix every metric of vs-controller.
	Namespace = "runtime_watcher"
	Subsystem = "vs_controller"
)

var (
	// VirtualServiceReconciles counts Watcher reconciles by result:
	// applied, unchanged, deleted, apply-failed.
	VirtualServiceReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "virtualservice_reconciles_total",
		Help: "Watcher reconciles by outcome: applied, unchanged, deleted, apply-failed.",
	}, []string{"result"})
	// WatcherWrites counts the Watcher reconciler's write requests by kind.
	WatcherWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "watcher_writes_total",
		Help: "Write requests the Watcher reconciler issued, by kind of write.",
	}, []string{"kind"})
	// RuntimeReconciles counts runtime reconciles that reached the SKR, by
	// result: applied, unchanged, unreachable, failed, invalid-kubeconfig,
	// removed.
	RuntimeReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_reconciles_total",
		Help: "Runtime reconciles that reached the SKR, by outcome: applied, unchanged, unreachable, failed, invalid-kubeconfig, removed.",
	}, []string{"result"})
	// RuntimeWrites counts the runtime reconciler's write requests (KCP and
	// SKR) by kind.
	RuntimeWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_writes_total",
		Help: "Write requests the runtime reconciler issued (KCP and SKR), by kind of write.",
	}, []string{"kind"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(VirtualServiceReconciles, WatcherWrites, RuntimeReconciles, RuntimeWrites)
}
