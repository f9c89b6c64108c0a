//go:debug fips140=only

package assertion_test

import (
	"crypto/fips140"
	"testing"
)

// The package's tests run with Go's FIPS 140-3 module enforced (the
// directive above): Ed25519 signing and verifying, SHA-256 key IDs and the
// key files' PKCS#8 and certificate parsing are all approved, as the
// binaries need (their //go:debug fips140=on, GOFIPS140=v1.0.0).
func TestFIPSOnly(t *testing.T) {
	if !fips140.Enabled() {
		t.Fatal("FIPS 140-3 mode is off: the //go:debug directive did not apply")
	}
}
