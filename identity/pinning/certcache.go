package pinning

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/asn1"
	"strings"
	"sync"
	"time"
)

// Bounds of the decoded-certificate cache of a Verifier.
const (
	// certCacheSize bounds the entries (about 400 bytes each for a typical
	// SKR certificate, so at most ~50 MiB), enough for every runtime of a
	// fleet of 100,000: heartbeats reach every runtime's certificate every
	// few minutes, and a cache smaller than the fleet then misses on most
	// requests (the 100,000-runtime benchmark: 16,384 entries cost 37 % of
	// the ceiling's RPS; docs/performance.md, "Fleet scale").
	certCacheSize = 131072
	// certCacheMaxDNSNames: certificates with more DNS SANs are decoded on
	// every request instead of being cached, so one entry stays small.
	certCacheMaxDNSNames = 8
)

// certInfo is what SAN pinning needs of a decoded client certificate.
type certInfo struct {
	cn                  string
	cns                 int // CN attributes in the subject
	dnsNames            []string
	sans                int // DNS + URI + IP + email
	notBefore, notAfter time.Time
	derHash             [sha256.Size]byte

	// verified: the certificate chains to the Verifier's roots of
	// generation rootsGen at any time within [verifiedFrom, verifiedUntil]
	// (the validity common to the chain).
	verified                    bool
	rootsGen                    uint64
	verifiedFrom, verifiedUntil time.Time
}

func newCertInfo(c *x509.Certificate) *certInfo {
	return &certInfo{
		cn:        c.Subject.CommonName,
		cns:       countCNs(c),
		dnsNames:  c.DNSNames,
		sans:      len(c.DNSNames) + len(c.URIs) + len(c.IPAddresses) + len(c.EmailAddresses),
		notBefore: c.NotBefore,
		notAfter:  c.NotAfter,
		derHash:   sha256.Sum256(c.Raw),
	}
}

// countCNs counts the subject's CN attributes: Go's Subject.CommonName
// keeps only one of them, so a second CN would go unseen.
func countCNs(c *x509.Certificate) int {
	n := 0
	for _, a := range c.Subject.Names {
		if a.Type.Equal(oidCommonName) {
			n++
		}
	}
	return n
}

var oidCommonName = asn1.ObjectIdentifier{2, 5, 4, 3}

func (i *certInfo) validAt(t time.Time) bool { return !t.Before(i.notBefore) && !t.After(i.notAfter) }

// verifiedAt: the chain was verified against the roots of generation gen
// (not older ones, which may have held a CA removed since) and is valid at t.
func (i *certInfo) verifiedAt(t time.Time, gen uint64) bool {
	return i.verified && i.rootsGen == gen && !t.Before(i.verifiedFrom) && !t.After(i.verifiedUntil)
}

// setVerified records a successful chain verification against the roots of
// generation gen and the time window in which every certificate of one
// verified chain is valid.
func (i *certInfo) setVerified(chains [][]*x509.Certificate, gen uint64) {
	if len(chains) == 0 {
		return
	}
	from, until := i.notBefore, i.notAfter
	for _, c := range chains[0] {
		if c.NotBefore.After(from) {
			from = c.NotBefore
		}
		if c.NotAfter.Before(until) {
			until = c.NotAfter
		}
	}
	i.verified, i.rootsGen, i.verifiedFrom, i.verifiedUntil = true, gen, from, until
}

// certCache maps the SHA-256 of a Cert value to its certInfo. It holds at
// most certCacheSize entries; when full, an arbitrary entry makes room. The
// zero value is ready to use. Entries are never modified after put.
type certCache struct {
	mu sync.RWMutex
	m  map[[sha256.Size]byte]*certInfo
}

func (c *certCache) get(k [sha256.Size]byte) *certInfo {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.m[k]
}

func (c *certCache) put(k [sha256.Size]byte, info *certInfo) {
	if len(info.dnsNames) > certCacheMaxDNSNames || len(info.cn) > 256 {
		return
	}
	// Keep only the strings pinning reads, not the decoded certificate
	// they point into.
	small := *info
	small.cn = strings.Clone(info.cn)
	small.dnsNames = make([]string, len(info.dnsNames))
	for j, d := range info.dnsNames {
		small.dnsNames[j] = strings.Clone(d)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = make(map[[sha256.Size]byte]*certInfo)
	}
	if _, ok := c.m[k]; !ok && len(c.m) >= certCacheSize {
		for old := range c.m {
			delete(c.m, old)
			break
		}
	}
	c.m[k] = &small
}

func (c *certCache) size() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.m)
}
