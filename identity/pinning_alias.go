package identity

import "github.com/seed-c8be168e/runtime-watcher/identity/pinning"

// SAN pinning lives in identity/pinning (no controller-runtime, for
// ext-authz); these are its names in this package.
type (
	// Runtime is pinning.Runtime.
	Runtime = pinning.Runtime
	// RuntimeLookup is pinning.RuntimeLookup.
	RuntimeLookup = pinning.RuntimeLookup
	// Identity is pinning.Identity.
	Identity = pinning.Identity
	// Denial is pinning.Denial.
	Denial = pinning.Denial
	// Verifier is pinning.Verifier.
	Verifier = pinning.Verifier
)

// ErrNoLookup is pinning.ErrNoLookup.
var ErrNoLookup = pinning.ErrNoLookup

// NormalizeDomain is pinning.NormalizeDomain.
func NormalizeDomain(d string) string { return pinning.NormalizeDomain(d) }

func isDNS1123Subdomain(s string) bool { return pinning.IsDNS1123Subdomain(s) }
