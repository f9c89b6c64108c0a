package pinning

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// Runtime is what SAN pinning (and a caller that enqueues the runtime's
// Kyma) needs to know of a Kyma CR.
type Runtime struct {
	ID        string // runtime ID: identity.RuntimeIDOf the Kyma
	KymaName  string // name of the Kyma CR (its namespace is the lookup's)
	SKRDomain string // raw value of the skr-domain annotation; "" when not set
	// Retired says which of the runtime's certificates are retired (its
	// Kyma's retired-certificates annotation).
	Retired Retirement
	// Deleting: the Kyma's deletion was asked for (its finalizers may keep
	// it for a while); SAN pinning refuses its runtime from then on.
	Deleting bool
	Class    string // the runtime's rate-limit class (KymaRef.Class); "" when none
}

// RuntimeLookup finds the Kyma CR of a runtime ID. found=false: no such
// runtime. identity.NewKymaLookup (over a controller-runtime reader) and
// identity/kymastore (ext-authz's own store) implement it over Kyma CRs,
// both through LookupInIndex.
type RuntimeLookup interface {
	LookupRuntime(ctx context.Context, runtimeID string) (rt Runtime, found bool, err error)
}

// Identity is a verified SKR.
type Identity struct {
	RuntimeID string // certificate CN
	SKRDomain string // the Kyma annotation value, lowercased, trailing dot removed
	Class     string // the runtime's rate-limit class (Runtime.Class), "" when none
	// Fingerprint is the SHA-256 of the certificate's DER once it was
	// decoded (also on a refusal; zero before), for logs: it names the
	// certificate without carrying it.
	Fingerprint [sha256.Size]byte
}

// Denial is a refusal with a contract reason; it implements error.
type Denial struct {
	Reason  contract.DenyReason
	Message string
}

func (d *Denial) Error() string { return string(d.Reason) + ": " + d.Message }

// Verifier does SAN pinning. Lookup is required; Roots optional (when set,
// the leaf must chain to it, else invalid-certificate); Now defaults to
// time.Now.
//
// A Verifier remembers what it decoded of recently seen certificates (a
// bounded cache keyed by the SHA-256 of the header's Cert value), so a
// runtime's repeated requests do not decode its certificate again; validity
// times are still checked on every request. Set the fields before the first
// Verify and do not copy a Verifier after it.
//
// Roots that change while the Verifier is in use (a reloaded CA file) are
// given with SetRoots, not by assigning the field.
type Verifier struct {
	Lookup RuntimeLookup
	Roots  *x509.CertPool
	Now    func() time.Time

	// roots, once SetRoots was called, replaces Roots. Verify reads it with
	// one atomic load.
	roots   atomic.Pointer[rootSet]
	rootsMu sync.Mutex // serializes SetRoots
	cache   certCache
}

// rootSet is one generation of roots. A certificate's chain verification is
// cached with the generation it was verified against (generation 0: the
// Roots field), so a new generation invalidates every cached verification.
type rootSet struct {
	pool *x509.CertPool
	gen  uint64
}

// SetRoots replaces the roots certificates must chain to (nil: no chain is
// required), safely while Verify runs in other goroutines; the pool must not
// be modified afterwards. Every chain verified against the roots before is
// verified again on the certificate's next request, so from the return of
// SetRoots on a certificate whose CA was removed is refused
// (invalid-certificate) and one from an added CA is accepted. A Verify
// already running may finish with the roots it started with.
func (v *Verifier) SetRoots(pool *x509.CertPool) {
	v.rootsMu.Lock()
	defer v.rootsMu.Unlock()
	var gen uint64 = 1
	if prev := v.roots.Load(); prev != nil {
		gen = prev.gen + 1
	}
	v.roots.Store(&rootSet{pool: pool, gen: gen})
}

// currentRoots are the roots in effect and their generation.
func (v *Verifier) currentRoots() (*x509.CertPool, uint64) {
	if r := v.roots.Load(); r != nil {
		return r.pool, r.gen
	}
	return v.Roots, 0
}

// ErrNoLookup is returned by Verify when the Verifier has no Lookup.
var ErrNoLookup = errors.New("identity: Verifier.Lookup is nil")

// Verify checks the XFCC header (and, when non-empty, the PEM of
// attributes.source.certificate, which must be the same certificate).
// Returns (*Denial) as error for every refusal; any other error (lookup
// failed) must be treated by callers as fail-closed (not allowed).
//
// sourceCertPEM may be plain PEM or URL-encoded PEM (Envoy URL-encodes
// attributes.source.certificate); a value starting with "-----BEGIN " is
// taken as plain PEM, anything else is query-unescaped first.
//
// When a refusal happens after the certificate was decoded, the returned
// Identity's RuntimeID holds the certificate's CN for logging; it is not an
// identity to trust.
func (v *Verifier) Verify(ctx context.Context, xfccHeader string, sourceCertPEM string) (Identity, error) {
	if v.Lookup == nil {
		return Identity{}, ErrNoLookup
	}
	t := v.now()
	cert, d := v.certificate(xfccHeader, sourceCertPEM, t)
	if d != nil {
		if cert != nil {
			return Identity{RuntimeID: cert.cn, Fingerprint: cert.derHash}, d
		}
		return Identity{}, d
	}
	id := Identity{RuntimeID: cert.cn, Fingerprint: cert.derHash}

	rt, found, err := v.Lookup.LookupRuntime(ctx, id.RuntimeID)
	if err != nil {
		return id, fmt.Errorf("identity: looking up runtime %q: %w", id.RuntimeID, err)
	}
	if !found {
		return id, deny(contract.ReasonUnknownRuntime, "no Kyma for runtime %q", id.RuntimeID)
	}
	if rt.Deleting {
		// The platform took its trust back when it asked for the deletion,
		// not when the finalizers (vs-controller's removes the SKR bundle)
		// let the Kyma go.
		return id, deny(contract.ReasonUnknownRuntime, "the Kyma of runtime %q is being deleted", id.RuntimeID)
	}
	domain := NormalizeDomain(rt.SKRDomain)
	if domain == "" {
		return id, deny(contract.ReasonDomainNotSet, "Kyma of runtime %q has no %s annotation", id.RuntimeID, contract.AnnotationSKRDomain)
	}
	if !IsDNS1123Subdomain(domain) {
		return id, deny(contract.ReasonSANMismatch, "the %s of runtime %q is not a DNS name", contract.AnnotationSKRDomain, id.RuntimeID)
	}
	if !hasDNSSAN(cert, domain) {
		// The message goes back to the client: it does not reveal the domain.
		return id, deny(contract.ReasonSANMismatch, "no DNS SAN of the certificate of runtime %q is its %s", id.RuntimeID, contract.AnnotationSKRDomain)
	}
	if rt.Retired.retired(cert.notBefore, t) {
		return id, deny(contract.ReasonRevoked, "the certificate of runtime %q (valid from %s) is retired: %s", id.RuntimeID,
			cert.notBefore.UTC().Format(time.RFC3339), rt.Retired)
	}
	id.SKRDomain, id.Class = domain, rt.Class
	return id, nil
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// certificate decodes and checks the certificate; it returns what pinning
// needs of it (when decoded) and a denial.
func (v *Verifier) certificate(header, sourceCertPEM string, t time.Time) (*certInfo, *Denial) {
	if header == "" {
		return nil, deny(contract.ReasonMissingClientCert, "no %s header", contract.HeaderXFCC)
	}
	if len(header) > contract.MaxXFCCBytes {
		return nil, deny(contract.ReasonMalformedXFCC, "header longer than %d bytes", contract.MaxXFCCBytes)
	}
	elems, err := xfcc.Parse(header)
	switch {
	case err != nil:
		return nil, deny(contract.ReasonMalformedXFCC, "%v", err)
	case len(elems) == 0:
		return nil, deny(contract.ReasonMissingClientCert, "empty %s header", contract.HeaderXFCC)
	case len(elems) > 1:
		return nil, deny(contract.ReasonMalformedXFCC, "%d elements, want exactly one", len(elems))
	}
	certValue, err := elems[0].CertValue()
	if err != nil { // ErrMultipleCerts or ErrNoCert
		return nil, deny(contract.ReasonMalformedXFCC, "%v", err)
	}

	roots, gen := v.currentRoots()
	key := hashString(certValue)
	info := v.cache.get(key)
	if info == nil || (roots != nil && !info.verifiedAt(t, gen)) {
		cert, err := xfcc.DecodeCert(certValue)
		if err != nil {
			return nil, deny(contract.ReasonInvalidCertificate, "%v", err)
		}
		info = newCertInfo(cert)
		if roots != nil && info.sans <= contract.MaxSANs && info.validAt(t) {
			chains, err := cert.Verify(x509.VerifyOptions{
				Roots:       roots,
				CurrentTime: t,
				KeyUsages:   []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
			})
			if err != nil {
				return info, deny(contract.ReasonInvalidCertificate, "certificate does not chain to the trusted CA: %v", err)
			}
			info.setVerified(chains, gen)
		}
		v.cache.put(key, info)
	}

	if info.sans > contract.MaxSANs {
		return info, deny(contract.ReasonTooManySANs, "%d SANs, at most %d allowed", info.sans, contract.MaxSANs)
	}
	switch {
	case t.Before(info.notBefore):
		return info, deny(contract.ReasonInvalidCertificate, "certificate not valid before %s", info.notBefore.UTC().Format(time.RFC3339))
	case t.After(info.notAfter):
		return info, deny(contract.ReasonInvalidCertificate, "certificate expired at %s", info.notAfter.UTC().Format(time.RFC3339))
	case info.cn == "":
		return info, deny(contract.ReasonInvalidCertificate, "certificate has no CN")
	case info.cns > 1:
		return info, deny(contract.ReasonInvalidCertificate, "certificate has %d CNs, want exactly one", info.cns)
	}
	if sourceCertPEM != "" {
		src, err := decodeSourceCert(sourceCertPEM)
		if err != nil {
			return info, deny(contract.ReasonInvalidCertificate, "source certificate: %v", err)
		}
		if sha256.Sum256(src.Raw) != info.derHash {
			return info, deny(contract.ReasonCertificateMismatch, "source certificate differs from the %s certificate", contract.HeaderXFCC)
		}
	}
	return info, nil
}

func decodeSourceCert(s string) (*x509.Certificate, error) {
	if len(s) > contract.MaxXFCCBytes {
		return nil, fmt.Errorf("longer than %d bytes", contract.MaxXFCCBytes)
	}
	if strings.HasPrefix(s, "-----BEGIN ") {
		return xfcc.ParsePEMCert([]byte(s))
	}
	return xfcc.DecodeCert(s)
}

// NormalizeDomain lowercases an ASCII domain and removes one trailing dot
// (and surrounding whitespace). It is the form of Identity.SKRDomain.
func NormalizeDomain(d string) string {
	d = strings.TrimSuffix(strings.TrimSpace(d), ".")
	return asciiLower(d)
}

// hasDNSSAN reports whether the certificate has a DNS SAN equal to the
// normalized domain. Wildcard SANs never match.
func hasDNSSAN(cert *certInfo, domain string) bool {
	for _, san := range cert.dnsNames {
		if strings.Contains(san, "*") {
			continue
		}
		if NormalizeDomain(san) == domain {
			return true
		}
	}
	return false
}

// IsDNS1123Subdomain is validation.IsDNS1123Subdomain without a regular
// expression (it runs on every allowed request and every Kyma lookup by name): at most 253 characters,
// dot-separated labels of [a-z0-9-] that start and end alphanumeric.
func IsDNS1123Subdomain(s string) bool {
	if len(s) == 0 || len(s) > 253 {
		return false
	}
	labelStart := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && s[i] != '.' {
			c := s[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
			continue
		}
		if i == labelStart || s[labelStart] == '-' || s[i-1] == '-' {
			return false // empty label, or one starting or ending with '-'
		}
		labelStart = i + 1
	}
	return true
}

// hashString is the SHA-256 of s, read in place (no copy of the up to
// 32 KiB value; the hash neither keeps nor modifies it).
func hashString(s string) [sha256.Size]byte {
	return sha256.Sum256(unsafe.Slice(unsafe.StringData(s), len(s)))
}

// asciiLower lowercases ASCII letters only (no Unicode case folding, so
// e.g. the Kelvin sign never equals 'k').
func asciiLower(s string) string {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c >= 'A' && c <= 'Z' {
			b := []byte(s)
			for j := i; j < len(b); j++ {
				if b[j] >= 'A' && b[j] <= 'Z' {
					b[j] += 'a' - 'A'
				}
			}
			return string(b)
		}
	}
	return s
}

func deny(reason contract.DenyReason, format string, args ...any) *Denial {
	return &Denial{Reason: reason, Message: fmt.Sprintf(format, args...)}
}
