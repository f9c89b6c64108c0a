//go:debug fips140=on

package main

// Go's FIPS 140-3 module is on (the directive above; a GODEBUG set at run
// time wins); run registers fipsmode.Collector("ext_authz") so /metrics
// shows it.
