// Package pki makes X.509 certificates for tests: a CA, and server or client
// leaves with the CN, DNS SANs, URI SANs and validity a test needs. It stands
// in for cert-manager's CA issuer in unit tests and writes PEM files for the
// real binaries.
package pki

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"testing"
	"time"
	"unicode/utf16"
)

// CA is a self-signed certificate authority.
type CA struct {
	Cert *x509.Certificate
	Key  *ecdsa.PrivateKey
	PEM  []byte
}

// NewCA creates a CA valid for a day.
func NewCA(name string) (*CA, error) {
	return NewCAValid(name, time.Now().Add(-time.Hour), time.Now().Add(24*time.Hour))
}

// MustCA is NewCA for a test: it fails t instead of returning an error.
func MustCA(t testing.TB, name string) *CA {
	t.Helper()
	ca, err := NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// Bundle is the PEM bundle of cas, in order, as a CA file holds them.
func Bundle(cas ...*CA) []byte {
	var b []byte
	for _, ca := range cas {
		b = append(b, ca.PEM...)
	}
	return b
}

// NewCAValid creates a CA valid from notBefore to notAfter.
func NewCAValid(name string, notBefore, notAfter time.Time) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             notBefore,
		NotAfter:              notAfter,
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Pool is a cert pool holding only this CA.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.Cert)
	return p
}

// LeafOptions describe a leaf certificate. Zero NotBefore/NotAfter mean
// "valid from an hour ago for a day".
type LeafOptions struct {
	CommonName string
	// ExtraCommonNames are further CN attributes in the subject (a forged
	// certificate with several CNs).
	ExtraCommonNames []string
	// CommonNameBMP encodes the CN as a BMPString (UTF-16), a string type
	// cert-manager never writes (the subject is then the CN alone).
	CommonNameBMP bool
	DNSNames      []string
	URIs          []string
	IPs           []net.IP
	NotBefore     time.Time
	NotAfter      time.Time
}

// Leaf is a signed certificate with its key.
type Leaf struct {
	Cert    *x509.Certificate
	CertPEM []byte
	KeyPEM  []byte
}

// TLS returns the leaf as a tls.Certificate.
func (l *Leaf) TLS() (tls.Certificate, error) { return tls.X509KeyPair(l.CertPEM, l.KeyPEM) }

// Issue signs a leaf usable for both server and client authentication.
func (ca *CA) Issue(o LeafOptions) (*Leaf, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	nb, na := o.NotBefore, o.NotAfter
	if nb.IsZero() {
		nb = time.Now().Add(-time.Hour)
	}
	if na.IsZero() {
		na = time.Now().Add(24 * time.Hour)
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: o.CommonName},
		NotBefore:    nb,
		NotAfter:     na,
		DNSNames:     o.DNSNames,
		IPAddresses:  o.IPs,
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	if len(o.ExtraCommonNames) > 0 {
		// ExtraNames replace CommonName when they hold a CN: list them all.
		oidCN := asn1.ObjectIdentifier{2, 5, 4, 3}
		for _, cn := range append([]string{o.CommonName}, o.ExtraCommonNames...) {
			tmpl.Subject.ExtraNames = append(tmpl.Subject.ExtraNames, pkix.AttributeTypeAndValue{Type: oidCN, Value: cn})
		}
	}
	if o.CommonNameBMP {
		raw, err := bmpSubject(o.CommonName)
		if err != nil {
			return nil, err
		}
		tmpl.RawSubject = raw
	}
	for _, u := range o.URIs {
		pu, err := url.Parse(u)
		if err != nil {
			return nil, fmt.Errorf("uri SAN %q: %w", u, err)
		}
		tmpl.URIs = append(tmpl.URIs, pu)
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.Cert, &key.PublicKey, ca.Key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	kd, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, err
	}
	return &Leaf{
		Cert:    cert,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kd}),
	}, nil
}

// WriteFiles writes ca.crt, tls.crt and tls.key into dir (the key layout of
// a cert-manager Secret and of skr-webhook-tls) and returns their paths.
func (l *Leaf) WriteFiles(dir string, ca *CA) (caFile, certFile, keyFile string, err error) {
	caFile, certFile, keyFile = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	for _, f := range []struct {
		path string
		data []byte
	}{{caFile, ca.PEM}, {certFile, l.CertPEM}, {keyFile, l.KeyPEM}} {
		if err = os.WriteFile(f.path, f.data, 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// bmpSubject is the DER of a subject whose one attribute is the CN cn as
// a BMPString.
func bmpSubject(cn string) ([]byte, error) {
	type attribute struct {
		Type  asn1.ObjectIdentifier
		Value asn1.RawValue
	}
	type attributeSET []attribute // encoding/asn1: a type named *SET is a SET OF
	var utf16be []byte
	for _, u := range utf16.Encode([]rune(cn)) {
		utf16be = append(utf16be, byte(u>>8), byte(u))
	}
	cnAttr := attribute{Type: asn1.ObjectIdentifier{2, 5, 4, 3}, Value: asn1.RawValue{Class: asn1.ClassUniversal, Tag: asn1.TagBMPString, Bytes: utf16be}}
	return asn1.Marshal([]attributeSET{{cnAttr}})
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
	if err != nil {
		panic(err) // crypto/rand never fails on Linux
	}
	return n
}
