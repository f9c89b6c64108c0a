// Package fipsmode shows whether a binary runs with Go's FIPS 140-3 module
// on. Every binary of Runtime Watcher (and the examples) turns it on by
// default with the directive `//go:debug fips140=on` in its main package
// (a GODEBUG set at run time still wins: fips140=only is stricter,
// fips140=off turns it off; skr-webhook/fips.go says why the binaries are
// built with the certified module, GOFIPS140=v1.0.0); Collector exports the
// mode as runtime_watcher_<component>_fips140_enabled.
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
