//go:debug fips140=on

package main

// Go's FIPS 140-3 module is on (the directive above; a GODEBUG set at run
// time wins); run registers runtime_watcher_ext_authz_fips140_enabled
// (package fipsmode) so /metrics shows it.
