package xfcc_test

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// FuzzParse checks the parser's invariants on arbitrary input. The seed
// corpus is in testdata/fuzz/FuzzParse (the 49 fixture vectors, grammar edge
// cases and Envoy-encoded certificates).
func FuzzParse(f *testing.F) {
	f.Add(`By=spiffe://a;Hash=1;Cert="-----BEGIN%20CERTIFICATE-----%0AAAAA%0A-----END%20CERTIFICATE-----%0A";Subject="CN=a\"b";URI=x;DNS=y`)
	f.Add("Hash=a, Hash=b;\tURI=c")
	// Envoy's 2025-26 advisories (issue 42): what a gateway could write for
	// a NUL inside a SAN or the CN, SAN text in XFCC syntax, duplicate SANs.
	for _, h := range []string{
		"Hash=1;Subject=\"CN=rt\";DNS=rt.example.com\x00.attacker.example.com",
		"Hash=1;Subject=\"CN=rt\x00.attacker\";DNS=rt.example.com",
		"Hash=1;Subject=\"CN=rt\";DNS=a.example.com;DNS=victim.example.com",
		`Hash=1;Subject="CN=rt";DNS="b\",DNS=victim.example.com"`,
		"Hash=1;Subject=\"CN=rt\";DNS=x=victim.example.com,DNS=victim.example.com",
		`Hash=1;Subject="CN=victim\";DNS=victim.example.com,By=rt";DNS=rt.example.com`,
		"Hash=1;Subject=\"CN=rt\";DNS=rt.example.com;DNS=rt.example.com;DNS=RT.EXAMPLE.COM",
	} {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, header string) {
		elems, err := xfcc.Parse(header)
		if len(header) > xfcc.MaxHeaderBytes && !errors.Is(err, xfcc.ErrTooLarge) {
			t.Fatalf("header of %d bytes accepted (err %v)", len(header), err)
		}
		if err != nil {
			if elems != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if header == "" && len(elems) != 0 {
			t.Fatalf("empty header gave %d elements", len(elems))
		}
		if len(elems) > xfcc.MaxElements {
			t.Fatalf("%d elements", len(elems))
		}
		size, pairs := 0, 0
		for _, e := range elems {
			if len(e) == 0 || len(e) > xfcc.MaxPairsPerElement {
				t.Fatalf("element with %d pairs", len(e))
			}
			pairs += len(e)
			for _, p := range e {
				if p.Key == "" || strings.ContainsAny(p.Key, "=;,\" \t") {
					t.Fatalf("bad key %q", p.Key)
				}
				if !p.Quoted && strings.ContainsAny(p.Value, ";,\"") {
					t.Fatalf("unquoted value %q holds a separator", p.Value)
				}
				if strings.ContainsFunc(p.Value, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
					t.Fatalf("value %q holds a control character", p.Value)
				}
				if len(p.Unescaped()) > len(p.Value) {
					t.Fatalf("unescaping grew %q", p.Value)
				}
				size += len(p.Key) + len(p.Value)
			}
			// Decoding must never panic, and must give a certificate or an error.
			if c, err := e.Certificate(); (c == nil) == (err == nil) {
				t.Fatalf("Certificate() = %v, %v", c, err)
			}
		}
		if pairs > xfcc.MaxPairs || (len(elems) > 0 && size >= len(header)) {
			t.Fatalf("%d pairs, %d bytes of keys and values from %d bytes", pairs, size, len(header))
		}
		// Re-parse stability: what Format writes parses to the same elements,
		// and is the input itself when it had no optional whitespace.
		out := xfcc.Format(elems)
		if len(out) > len(header) {
			t.Fatalf("Format grew %d bytes to %d", len(header), len(out))
		}
		again, err := xfcc.Parse(out)
		if err != nil || !reflect.DeepEqual(again, elems) {
			t.Fatalf("re-parse of %q: %v, %+v != %+v", out, err, again, elems)
		}
		if !strings.ContainsAny(header, " \t") && out != header {
			t.Fatalf("Format(Parse(%q)) = %q", header, out)
		}
	})
}

// FuzzDecodeCert checks DecodeCert against the plain standard-library
// decoding it optimizes (net/url.QueryUnescape, then encoding/pem): the same
// certificate or the same class of error for every input.
func FuzzDecodeCert(f *testing.F) {
	ca, err := pki.NewCA("fuzz-ca")
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}})
	if err != nil {
		f.Fatal(err)
	}
	pemText := string(leaf.CertPEM)
	for _, s := range []string{
		xfcc.EncodeCert(leaf.CertPEM),
		url.QueryEscape(pemText),
		url.PathEscape(pemText),
		xfcc.EncodeCert([]byte(strings.ReplaceAll(pemText, "\n", "\r\n"))),
		xfcc.EncodeCert([]byte("  " + pemText + "\n\n")),
		xfcc.EncodeCert([]byte(strings.Replace(pemText, "\n", "\nX: y\n\n", 1))),
		xfcc.EncodeCert([]byte(pemText + pemText)),
		xfcc.EncodeCert(leaf.KeyPEM),
		"-----BEGIN+CERTIFICATE-----%0AAAAA%0A-----END+CERTIFICATE-----",
		"%ZZ", "%4", "", "foobar",
	} {
		f.Add(s)
	}
	// The odd certificates of Envoy's 2025-26 advisories (issue 42), as the
	// gateway encodes them.
	for _, o := range []pki.LeafOptions{
		{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com\x00.attacker.example.com"}},
		{CommonName: "runtime-1\x00.attacker", DNSNames: []string{"skr1.example.com"}},
		{CommonName: "runtime-1", CommonNameBMP: true, DNSNames: []string{"skr1.example.com"}},
		{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com", "skr1.example.com"}},
		{CommonName: `victim";DNS=victim.example.com,By=x`, DNSNames: []string{`a.example.com;DNS=victim.example.com`, `b",DNS=victim`, "x=v,DNS=v"}},
	} {
		odd, err := ca.Issue(o)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(xfcc.EncodeCert(odd.CertPEM))
	}
	f.Fuzz(func(t *testing.T, v string) {
		got, gotErr := xfcc.DecodeCert(v)
		want, wantErr := referenceDecodeCert(v)
		if (gotErr == nil) != (wantErr == nil) {
			t.Fatalf("DecodeCert(%q): err %v, reference err %v", v, gotErr, wantErr)
		}
		if gotErr != nil {
			for _, class := range []error{xfcc.ErrNoCert, xfcc.ErrCertEncoding, xfcc.ErrCertPEM, xfcc.ErrCertDER} {
				if errors.Is(gotErr, class) != errors.Is(wantErr, class) {
					t.Fatalf("DecodeCert(%q): err %v, reference err %v", v, gotErr, wantErr)
				}
			}
			return
		}
		if !got.Equal(want) {
			t.Fatalf("DecodeCert(%q) decoded another certificate", v)
		}
	})
}

func referenceDecodeCert(v string) (*x509.Certificate, error) {
	if v == "" {
		return nil, xfcc.ErrNoCert
	}
	s, err := url.QueryUnescape(v)
	if err != nil {
		return nil, xfcc.ErrCertEncoding
	}
	data := bytes.TrimSpace([]byte(s))
	if !bytes.HasPrefix(data, []byte("-----BEGIN CERTIFICATE-----")) {
		return nil, xfcc.ErrCertPEM
	}
	block, rest := pem.Decode(data)
	if block == nil || block.Type != "CERTIFICATE" || len(block.Headers) != 0 || len(bytes.TrimSpace(rest)) != 0 {
		return nil, xfcc.ErrCertPEM
	}
	c, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return nil, xfcc.ErrCertDER
	}
	return c, nil
}
