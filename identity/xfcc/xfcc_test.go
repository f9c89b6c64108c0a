package xfcc_test

import (
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func TestParseGrammar(t *testing.T) {
	manyPairs := strings.Repeat("DNS=a.example.com;", xfcc.MaxPairsPerElement) + "URI="
	manyElements := strings.Repeat("Hash=a,", xfcc.MaxElements) + "Hash=a"
	tests := []struct {
		name    string
		header  string
		want    []xfcc.Element
		wantErr error // nil with wantSyntax=false: must parse
		syntax  bool
	}{
		{name: "empty", header: "", want: nil},
		{name: "one pair", header: "Hash=abc", want: []xfcc.Element{{{Key: "Hash", Value: "abc"}}}},
		{name: "equals in unquoted value splits at the first", header: "URI=spiffe://a/b?x=y=z",
			want: []xfcc.Element{{{Key: "URI", Value: "spiffe://a/b?x=y=z"}}}},
		{name: "URI smuggling a DNS pair is two pairs", header: "URI=spiffe://a/b;DNS=evil.example.com",
			want: []xfcc.Element{{{Key: "URI", Value: "spiffe://a/b"}, {Key: "DNS", Value: "evil.example.com"}}}},
		{name: "quoted value with separators", header: `Subject="CN=a,O=b;c=d";URI=`,
			want: []xfcc.Element{{{Key: "Subject", Value: "CN=a,O=b;c=d", Quoted: true}, {Key: "URI", Value: ""}}}},
		{name: "escaped backslash before closing quote", header: `Subject="a\\";Hash=x`,
			want: []xfcc.Element{{{Key: "Subject", Value: `a\\`, Quoted: true}, {Key: "Hash", Value: "x"}}}},
		{name: "optional whitespace before a key", header: "Hash=a, Hash=b;\tURI=c",
			want: []xfcc.Element{{{Key: "Hash", Value: "a"}}, {{Key: "Hash", Value: "b"}, {Key: "URI", Value: "c"}}}},
		{name: "exactly the element cap", header: strings.Repeat("Hash=a,", xfcc.MaxElements-1) + "Hash=a"},
		{name: "too large", header: "Hash=" + strings.Repeat("a", xfcc.MaxHeaderBytes), wantErr: xfcc.ErrTooLarge},
		{name: "too many elements", header: manyElements, wantErr: xfcc.ErrTooManyElements},
		{name: "too many pairs", header: manyPairs, wantErr: xfcc.ErrTooManyPairs},
		{name: "no equals", header: "Hash", syntax: true},
		{name: "empty key", header: "=abc", syntax: true},
		{name: "trailing semicolon", header: "Hash=a;", syntax: true},
		{name: "trailing comma", header: "Hash=a,", syntax: true},
		{name: "empty element", header: "Hash=a,,Hash=b", syntax: true},
		{name: "text after closing quote", header: `Subject="a"b;URI=`, syntax: true},
		{name: "space after closing quote", header: `Subject="a" ;URI=`, syntax: true},
		{name: "unterminated quote", header: `Cert="abc`, syntax: true},
		{name: "unterminated after escape", header: `Cert="abc\`, syntax: true},
		{name: "quote in unquoted value", header: `Cert=ab"c`, syntax: true},
		{name: "newline in value", header: "Hash=a\nDNS=b", syntax: true},
		{name: "control char in quoted value", header: "Subject=\"a\x00b\"", syntax: true},
		{name: "escaped control char", header: "Subject=\"a\\\x01\"", syntax: true},
		{name: "space inside key", header: "Ha sh=a", syntax: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := xfcc.Parse(tt.header)
			var se *xfcc.SyntaxError
			switch {
			case tt.syntax:
				if !errors.As(err, &se) {
					t.Fatalf("want a *SyntaxError, got %v (%+v)", err, got)
				}
			case tt.wantErr != nil:
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("want %v, got %v", tt.wantErr, err)
				}
			default:
				if err != nil {
					t.Fatalf("want ok, got %v", err)
				}
				if tt.want != nil && !reflect.DeepEqual(got, tt.want) {
					t.Fatalf("got %+v, want %+v", got, tt.want)
				}
			}
			if err != nil && got != nil {
				t.Fatalf("error %v with non-nil result", err)
			}
		})
	}
}

func TestElementLookup(t *testing.T) {
	elems, err := xfcc.Parse(`by=spiffe://gw;DNS=a.example.com;dns=b.example.com;SUBJECT="CN=x\"y";Other=z`)
	if err != nil {
		t.Fatal(err)
	}
	e := elems[0]
	if got := e.Values("DNS"); !reflect.DeepEqual(got, []string{"a.example.com", "b.example.com"}) {
		t.Errorf("Values(DNS) = %q", got)
	}
	if got, ok := e.Value("Subject"); !ok || got != `CN=x"y` {
		t.Errorf("Value(Subject) = %q, %v", got, ok)
	}
	if got, ok := e.Value("By"); !ok || got != "spiffe://gw" {
		t.Errorf("Value(By) = %q, %v", got, ok)
	}
	if _, ok := e.Value("Cert"); ok {
		t.Error("Value(Cert) found a Cert that is not there")
	}
}

func TestCertificate(t *testing.T) {
	ca, err := pki.NewCA("xfcc-test-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-2"})
	if err != nil {
		t.Fatal(err)
	}
	envoy := xfcc.EncodeCert(leaf.CertPEM)
	tests := []struct {
		name    string
		header  string
		wantCN  string
		wantErr error
	}{
		{name: "Envoy encoding, quoted", header: `Hash=x;Cert="` + envoy + `";Subject="CN=runtime-1"`, wantCN: "runtime-1"},
		{name: "Envoy encoding, unquoted", header: "Cert=" + envoy + ";URI=", wantCN: "runtime-1"},
		{name: "Go QueryEscape", header: `Cert="` + url.QueryEscape(string(leaf.CertPEM)) + `"`, wantCN: "runtime-1"},
		{name: "lower-case key", header: "cert=" + envoy, wantCN: "runtime-1"},
		{name: "no Cert", header: "Hash=x;URI=spiffe://a", wantErr: xfcc.ErrNoCert},
		{name: "empty Cert", header: "Cert=;URI=", wantErr: xfcc.ErrNoCert},
		{name: "Chain only", header: `Chain="` + envoy + `"`, wantErr: xfcc.ErrNoCert},
		{name: "two Cert pairs", header: "Cert=" + envoy + ";cert=" + xfcc.EncodeCert(other.CertPEM), wantErr: xfcc.ErrMultipleCerts},
		{name: "bad percent", header: "Cert=%ZZ", wantErr: xfcc.ErrCertEncoding},
		{name: "not PEM", header: "Cert=foobar", wantErr: xfcc.ErrCertPEM},
		{name: "text before PEM", header: "Cert=junk" + envoy, wantErr: xfcc.ErrCertPEM},
		{name: "two PEM blocks", header: "Cert=" + xfcc.EncodeCert(append(append([]byte{}, leaf.CertPEM...), other.CertPEM...)), wantErr: xfcc.ErrCertPEM},
		{name: "private key block", header: "Cert=" + xfcc.EncodeCert(leaf.KeyPEM), wantErr: xfcc.ErrCertPEM},
		{name: "bad DER", header: "Cert=-----BEGIN+CERTIFICATE-----%0AAAAA%0A-----END+CERTIFICATE-----", wantErr: xfcc.ErrCertDER},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			elems, err := xfcc.Parse(tt.header)
			if err != nil {
				t.Fatal(err)
			}
			c, err := elems[0].Certificate()
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("want %v, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Subject.CommonName != tt.wantCN || !c.Equal(leaf.Cert) {
				t.Fatalf("got CN %q, want %q and the same certificate", c.Subject.CommonName, tt.wantCN)
			}
		})
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for _, h := range []string{
		`By=spiffe://a;Hash=1;Cert="x%20y";Chain="z";Subject="CN=a\"b,O=c\\";URI=spiffe://b;DNS=a.example.com`,
		"Hash=a,Hash=b;URI=",
		`Subject="";URI=`,
	} {
		elems, err := xfcc.Parse(h)
		if err != nil {
			t.Fatal(err)
		}
		if got := xfcc.Format(elems); got != h {
			t.Errorf("Format(Parse(%q)) = %q", h, got)
		}
	}
}

// Example shows the identity lookup SAN pinning does: one element, its Cert
// decoded into a certificate, and CN and DNS SANs taken from it.
func Example() {
	ca, _ := pki.NewCA("example-ca")
	leaf, _ := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr.example.com"}})
	header := `Hash=abc;Cert="` + xfcc.EncodeCert(leaf.CertPEM) + `";Subject="CN=runtime-1";URI=spiffe://x;DNS=forged.example.com`

	elems, err := xfcc.Parse(header)
	if err != nil || len(elems) != 1 {
		fmt.Println("malformed")
		return
	}
	cert, err := elems[0].Certificate()
	if err != nil {
		fmt.Println("invalid certificate:", err)
		return
	}
	fmt.Println(cert.Subject.CommonName, cert.DNSNames)
	// Output: runtime-1 [skr.example.com]
}
