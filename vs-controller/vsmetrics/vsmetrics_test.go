package vsmetrics_test

import (
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// Every metric of vs-controller is runtime_watcher_vs_controller_… and is
// served from controller-runtime's registry.
func TestNames(t *testing.T) {
	for name, c := range map[string]*prometheus.CounterVec{
		"runtime_watcher_vs_controller_virtualservice_reconciles_total": vsmetrics.VirtualServiceReconciles,
		"runtime_watcher_vs_controller_watcher_writes_total":            vsmetrics.WatcherWrites,
		"runtime_watcher_vs_controller_runtime_reconciles_total":        vsmetrics.RuntimeReconciles,
		"runtime_watcher_vs_controller_runtime_writes_total":            vsmetrics.RuntimeWrites,
	} {
		c.WithLabelValues("test").Inc()
		if n, err := testutil.GatherAndCount(ctrlmetrics.Registry, name); err != nil || n != 1 {
			t.Errorf("%s: %d series in the registry, %v", name, n, err)
		}
		if !strings.HasPrefix(name, vsmetrics.Namespace+"_"+vsmetrics.Subsystem+"_") {
			t.Errorf("%s lacks the prefix", name)
		}
	}
	vsmetrics.KubeconfigUncachedReads.Inc()
	if n, err := testutil.GatherAndCount(ctrlmetrics.Registry, "runtime_watcher_vs_controller_kubeconfig_uncached_reads_total"); err != nil || n != 1 {
		t.Errorf("kubeconfig_uncached_reads_total: %d series in the registry, %v", n, err)
	}
}
