//go:debug fips140=on

package main

import (
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
)

// Go's FIPS 140-3 module is on (the directive above; a GODEBUG set at run
// time wins); /metrics shows it (package fipsmode).
//
// Its memory bound holds with the certified module v1.0.0 (GOFIPS140=v1.0.0,
// as Runtime Watcher's binaries are built), whose DRBG is seeded from the
// operating system. Later modules (v1.26.0, still in validation, and Go
// 1.26's in-tree module that a build without GOFIPS140 uses) seed it from a
// CPU-jitter entropy source whose 32 MiB scratch buffer becomes resident at
// the first seeding (the first TLS handshake), outside the Go heap and its
// soft limit. Under the load of the spec "keeps its memory under 128 MiB
// with 8 concurrent 6.5 MiB reviews" the webhook's peak is then 120–137
// MiB, at or over the bundle's 128 Mi limit; with v1.0.0 it is 90–113 MiB,
// as without FIPS mode (README, "Tracing and FIPS").
func init() {
	ctrlmetrics.Registry.MustRegister(fipsmode.Collector("runtime_watcher_skr_webhook_fips140_enabled"))
}
