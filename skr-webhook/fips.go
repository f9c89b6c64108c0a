package main

import (
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
)

// /metrics shows whether Go's FIPS 140-3 module is on (package fipsmode).
// Unlike the KCP binaries, the webhook does not turn it on by default: with
// GODEBUG=fips140=on its peak memory in the hostile-load spec ("keeps its
// memory under 128 MiB with 8 concurrent 6.5 MiB reviews") rose from 93.7
// to 129–131 MiB, over the bundle's 128 Mi limit (README, "Tracing and
// FIPS"). Set GODEBUG=fips140=on in its environment (test/fips does) with a
// larger memory limit.
func init() {
	ctrlmetrics.Registry.MustRegister(fipsmode.Collector("runtime_watcher_skr_webhook_fips140_enabled"))
}
