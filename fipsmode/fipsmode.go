// Package fipsmode shows whether a binary runs with Go's FIPS 140-3 module
// on, and names the module the binaries are built with.
//
// Every binary of Runtime Watcher is built with GOFIPS140=Module (the
// Makefile's build, the Dockerfile, testenv.BuildBinary): the CMVP-certified
// snapshot of Go's module ($GOROOT/lib/fips140/certified.txt), which also
// makes fips140=on the binary's default GODEBUG. Every main package (the
// skr-webhook too) carries the directive `//go:debug fips140=on` as well, so a plain
// `go build` runs them in FIPS mode too (with the toolchain's in-process
// module). A GODEBUG set at run time still wins: fips140=only is stricter,
// fips140=off turns it off. Collector exports the mode as
// runtime_watcher_<component>_fips140_enabled.
//
// Why the certified module and not the toolchain's own (Go 1.26: v1.26.0,
// in process of validation): v1.26.0 seeds its DRBG from a CPU-jitter
// entropy source that touches a 32 MiB scratch buffer in the binary's BSS
// (crypto/internal/fips140/drbg.memory), so every process in FIPS mode
// gains 32 MiB of resident memory (ext-authz idle: 22.6 → 55.8 MiB VmRSS);
// the certified v1.0.0 seeds from the kernel (getrandom) and costs nothing.
//
// In FIPS mode Go's crypto uses only approved algorithms: TLS negotiates
// only FIPS-approved versions, cipher suites, groups and signature
// algorithms, and keys below the approved sizes (RSA under 2048 bits) are
// refused (docs/operations.md, "FIPS 140-3").
package fipsmode

import (
	"crypto/fips140"

	"github.com/prometheus/client_golang/prometheus"
)

// Module is the GOFIPS140 value every binary is built with: Go's
// CMVP-certified FIPS 140-3 module v1.0.0. The Makefile (GOFIPS140) and the
// Dockerfile (ARG GOFIPS140) name the same value; test/fips checks that
// they do.
const Module = "v1.0.0"

// Collector is the gauge name (runtime_watcher_<component>_fips140_enabled,
// written out by the caller so that the name can be found in the code): 1
// when Go's FIPS 140-3 module is on, else 0.
func Collector(name string) prometheus.Collector {
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: name,
		Help: "1 when Go's FIPS 140-3 cryptographic module is on (GODEBUG fips140=on or only), else 0.",
	}, func() float64 {
		if fips140.Enabled() {
			return 1
		}
		return 0
	})
}
