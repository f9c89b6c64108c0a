//go:debug fips140=on

package main

import (
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
)

// Go's FIPS 140-3 module is on (the directive above; a GODEBUG set at run
// time wins), and /metrics shows it (package fipsmode).
func init() {
	ctrlmetrics.Registry.MustRegister(fipsmode.Collector("runtime_watcher_module_sync_fips140_enabled"))
}
