package filewatch

import (
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"time"
)

// CABundle is a parsed CA bundle file (PEM CA certificates).
type CABundle struct {
	// Pool holds every CA of the file; it is not modified after Parse.
	Pool *x509.CertPool
	// CAs in the order of the file.
	CAs []*x509.Certificate
	// NotAfter is the earliest not-after of the CAs (when the first of them
	// expires).
	NotAfter time.Time
	// Expired counts the CAs already expired when parsed (kept in Pool:
	// verification refuses them anyway).
	Expired int
	// SHA256 of the file's content.
	SHA256 [sha256.Size]byte
}

// Summary is a short description for logs: the CAs' subjects and not-after.
func (b *CABundle) Summary() []string {
	out := make([]string, 0, len(b.CAs))
	for _, c := range b.CAs {
		out = append(out, fmt.Sprintf("%s (not after %s, SHA-256 %s)", c.Subject.String(),
			c.NotAfter.UTC().Format(time.RFC3339), fingerprint(c)))
	}
	return out
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:8])
}

// ParseCABundle reads a PEM bundle of CA certificates. It fails when the data holds
// no PEM CERTIFICATE block, a PEM block of another type (a private key put
// into the wrong file), a certificate that does not parse or is not a CA
// (basic constraints CA:TRUE), or only CAs that expired at now. Text between
// PEM blocks (openssl's "subject=" lines) is ignored. A CA not valid yet is
// accepted: it becomes valid without the file changing. The one parser of
// every --ca-file (ext-authz, the listener, skr-webhook).
func ParseCABundle(data []byte, now time.Time) (*CABundle, error) {
	b := &CABundle{Pool: x509.NewCertPool(), SHA256: sha256.Sum256(data)}
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, want only CERTIFICATE blocks", len(b.CAs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(b.CAs)+1, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, fmt.Errorf("certificate %d (%s) is not a CA certificate", len(b.CAs)+1, c.Subject)
		}
		if now.After(c.NotAfter) {
			b.Expired++
		}
		if b.NotAfter.IsZero() || c.NotAfter.Before(b.NotAfter) {
			b.NotAfter = c.NotAfter
		}
		b.Pool.AddCert(c)
		b.CAs = append(b.CAs, c)
	}
	switch {
	case len(b.CAs) == 0:
		return nil, errors.New("no PEM certificate in it")
	case b.Expired == len(b.CAs):
		return nil, fmt.Errorf("every CA in it expired (the last at %s)", latestNotAfter(b.CAs).UTC().Format(time.RFC3339))
	}
	return b, nil
}

// UsableAt reports whether a CA of the bundle is still valid at t (not
// expired; a CA not valid yet counts, as in ParseCABundle).
func (b *CABundle) UsableAt(t time.Time) bool {
	return b != nil && !t.After(latestNotAfter(b.CAs))
}

func latestNotAfter(cas []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range cas {
		if c.NotAfter.After(t) {
			t = c.NotAfter
		}
	}
	return t
}

// LoadCABundle reads and parses the file at path.
func LoadCABundle(path string, now time.Time) (*CABundle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return ParseCABundle(data, now)
}
