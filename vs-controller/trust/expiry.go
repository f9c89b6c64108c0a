package trust

import (
	"crypto/x509"
	"time"
)

// Expiry is when leaf stops being usable: its own notAfter, or its CA's
// when ca (the CA that signed it, nil when unknown) expires first.
// cert-manager does not cap a leaf's lifetime at its CA's: a leaf issued
// shortly before its CA expires outlives it on paper, but no chain through
// an expired CA verifies.
func Expiry(leaf, ca *x509.Certificate) time.Time {
	if ca != nil && ca.NotAfter.Before(leaf.NotAfter) {
		return ca.NotAfter
	}
	return leaf.NotAfter
}
