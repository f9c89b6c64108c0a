// Package fips holds the test that runs ext-authz and skr-webhook in Go's
// FIPS 140-3 mode (GODEBUG=fips140=on, also their built-in default) and
// completes an mTLS exchange over TLS 1.3 between them through the gateway
// stand-in (issue 26).
package fips
