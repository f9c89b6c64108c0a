// Package fips holds the test that runs ext-authz and skr-webhook in Go's
// FIPS 140-3 mode, their built-in default (//go:debug fips140=on), and
// completes an mTLS exchange over TLS 1.3 between them through the gateway,
// upstream Envoy on the static edge of test/envoy (issues 26, 32).
package fips
