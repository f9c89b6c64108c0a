package identity_test

import (
	"context"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// mapLookup is a RuntimeLookup over a fixed set of runtimes (the lookups
// over Kyma CRs are tested in precedence_test.go, and against a real API
// server in identity/kymastore and the listener's integration suite).
type mapLookup struct {
	runtimes map[string]identity.Runtime
	err      error
}

func (m mapLookup) LookupRuntime(_ context.Context, id string) (identity.Runtime, bool, error) {
	if m.err != nil {
		return identity.Runtime{}, false, m.err
	}
	rt, ok := m.runtimes[id]
	return rt, ok, nil
}

// gatewayXFCC is the header an Istio gateway with SANITIZE_SET writes for a
// client certificate: Hash, Cert (Envoy-encoded), Subject, URI and DNS.
func gatewayXFCC(l *pki.Leaf) string {
	var b strings.Builder
	fmt.Fprintf(&b, `Hash=0f3d;Cert="%s";Subject="CN=%s"`, xfcc.EncodeCert(l.CertPEM), l.Cert.Subject.CommonName)
	if len(l.Cert.URIs) == 0 {
		b.WriteString(";URI=")
	}
	for _, u := range l.Cert.URIs {
		b.WriteString(";URI=" + u.String())
	}
	for _, d := range l.Cert.DNSNames {
		b.WriteString(";DNS=" + d)
	}
	return b.String()
}

type certs struct {
	ca, otherCA                                         *pki.CA
	good, upperDot, mismatch, wildcard, smuggle, noCN   *pki.Leaf
	twoCNs                                              *pki.Leaf
	expired, notYet, sans150, sans101Mixed, sans100     *pki.Leaf
	unknown, noDomain, emptyDomain, otherCASigned, twin *pki.Leaf
}

// certOf decodes the one certificate of an XFCC header.
func certOf(t *testing.T, header string) *x509.Certificate {
	t.Helper()
	elems, err := xfcc.Parse(header)
	if err != nil || len(elems) != 1 {
		t.Fatalf("XFCC %q: %d elements, %v", header, len(elems), err)
	}
	c, err := xfcc.DecodeCert(elems[0].Values(xfcc.KeyCert)[0])
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func issue(t *testing.T, ca *pki.CA, o pki.LeafOptions) *pki.Leaf {
	t.Helper()
	l, err := ca.Issue(o)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func dnsNames(n int) []string {
	var s []string
	for i := range n {
		s = append(s, fmt.Sprintf("san-%d.example.com", i))
	}
	return s
}

func newCerts(t *testing.T) certs {
	t.Helper()
	ca, err := pki.NewCA("pinning-ca")
	if err != nil {
		t.Fatal(err)
	}
	otherCA, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	webhook := []string{"skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}
	var ips []net.IP
	for i := range 21 {
		ips = append(ips, net.IPv4(10, 0, 0, byte(i)))
	}
	return certs{
		ca: ca, otherCA: otherCA,
		good:     issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: append([]string{"skr1.example.com"}, webhook...)}),
		upperDot: issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"SKR1.Example.COM."}}),
		mismatch: issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: append([]string{"skr2.example.com"}, webhook...)}),
		wildcard: issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"*.example.com"}}),
		// A URI SAN that, unquoted in the header, reads as a DNS pair for the domain.
		smuggle:       issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr2.example.com"}, URIs: []string{"spiffe://x/y;DNS=skr1.example.com"}}),
		noCN:          issue(t, ca, pki.LeafOptions{DNSNames: []string{"skr1.example.com"}}),
		twoCNs:        issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", ExtraCommonNames: []string{"runtime-other"}, DNSNames: []string{"skr1.example.com"}}),
		expired:       issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}, NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Minute)}),
		notYet:        issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}, NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)}),
		sans150:       issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: append([]string{"skr1.example.com"}, dnsNames(149)...)}),
		sans101Mixed:  issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: append([]string{"skr1.example.com"}, dnsNames(49)...), URIs: []string{"spiffe://a/1", "spiffe://a/2", "spiffe://a/3", "spiffe://a/4", "spiffe://a/5", "spiffe://a/6", "spiffe://a/7", "spiffe://a/8", "spiffe://a/9", "spiffe://a/10", "spiffe://a/11", "spiffe://a/12", "spiffe://a/13", "spiffe://a/14", "spiffe://a/15", "spiffe://a/16", "spiffe://a/17", "spiffe://a/18", "spiffe://a/19", "spiffe://a/20", "spiffe://a/21", "spiffe://a/22", "spiffe://a/23", "spiffe://a/24", "spiffe://a/25", "spiffe://a/26", "spiffe://a/27", "spiffe://a/28", "spiffe://a/29", "spiffe://a/30"}, IPs: ips}),
		sans100:       issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: append([]string{"skr1.example.com"}, dnsNames(99)...)}),
		unknown:       issue(t, ca, pki.LeafOptions{CommonName: "runtime-unknown", DNSNames: []string{"skr1.example.com"}}),
		noDomain:      issue(t, ca, pki.LeafOptions{CommonName: "runtime-nodomain", DNSNames: []string{"skr1.example.com"}}),
		emptyDomain:   issue(t, ca, pki.LeafOptions{CommonName: "runtime-emptydomain", DNSNames: []string{"skr1.example.com"}}),
		otherCASigned: issue(t, otherCA, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}}),
		twin:          issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}}),
	}
}

func TestVerify(t *testing.T) {
	c := newCerts(t)
	lookup := mapLookup{runtimes: map[string]identity.Runtime{
		"runtime-1":           {ID: "runtime-1", SKRDomain: "skr1.example.com"},
		"runtime-nodomain":    {ID: "runtime-nodomain"},
		"runtime-emptydomain": {ID: "runtime-emptydomain", SKRDomain: " "},
		"runtime-upper":       {ID: "runtime-upper", SKRDomain: "SKR1.example.com."},
	}}
	upperKyma := issue(t, c.ca, pki.LeafOptions{CommonName: "runtime-upper", DNSNames: []string{"skr1.example.com"}})
	wildKyma := issue(t, c.ca, pki.LeafOptions{CommonName: "runtime-wild", DNSNames: []string{"*.example.com"}})
	lookup.runtimes["runtime-wild"] = identity.Runtime{ID: "runtime-wild", SKRDomain: "*.example.com"}
	badKyma := issue(t, c.ca, pki.LeafOptions{CommonName: "runtime-bad", DNSNames: []string{"skr_1%.example.com"}})
	lookup.runtimes["runtime-bad"] = identity.Runtime{ID: "runtime-bad", SKRDomain: "skr_1%.example.com"}
	good := gatewayXFCC(c.good)

	tests := []struct {
		name   string
		header string
		source string
		roots  bool
		want   contract.DenyReason // "" = allow
		wantID identity.Identity
	}{
		{name: "good", header: good, wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},
		{name: "good, upper-case SAN with trailing dot", header: gatewayXFCC(c.upperDot), wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},
		{name: "good, annotation upper-case with trailing dot", header: gatewayXFCC(upperKyma), wantID: identity.Identity{RuntimeID: "runtime-upper", SKRDomain: "skr1.example.com"}},
		{name: "good, exactly 100 SANs", header: gatewayXFCC(c.sans100), wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},
		{name: "good, with CA", header: good, roots: true, wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},
		{name: "good, same source certificate (PEM)", header: good, source: string(c.good.CertPEM), wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},
		{name: "good, same source certificate (URL-encoded, as Envoy)", header: good, source: url.QueryEscape(string(c.good.CertPEM)), wantID: identity.Identity{RuntimeID: "runtime-1", SKRDomain: "skr1.example.com"}},

		{name: "no header", header: "", want: contract.ReasonMissingClientCert},
		{name: "header over 32 KiB", header: good + ";Hash=" + strings.Repeat("a", contract.MaxXFCCBytes), want: contract.ReasonMalformedXFCC},
		{name: "unparsable header", header: `Cert="unterminated`, want: contract.ReasonMalformedXFCC},
		{name: "forged second element", header: good + "," + gatewayXFCC(c.mismatch), want: contract.ReasonMalformedXFCC},
		{name: "client element before the gateway's", header: `By=spiffe://evil;Cert="` + xfcc.EncodeCert(c.good.CertPEM) + `",` + gatewayXFCC(c.mismatch), want: contract.ReasonMalformedXFCC},
		{name: "no Cert, only DNS and Subject pairs", header: `Hash=1;Subject="CN=runtime-1";URI=;DNS=skr1.example.com`, want: contract.ReasonMalformedXFCC},
		{name: "Chain only", header: `Hash=1;Chain="` + xfcc.EncodeCert(c.good.CertPEM) + `"`, want: contract.ReasonMalformedXFCC},
		{name: "two Cert pairs", header: good + `;Cert="` + xfcc.EncodeCert(c.twin.CertPEM) + `"`, want: contract.ReasonMalformedXFCC},
		{name: "Cert not URL-encoding", header: "Cert=%ZZ", want: contract.ReasonInvalidCertificate},
		{name: "Cert not PEM", header: `Cert="foobar"`, want: contract.ReasonInvalidCertificate},
		{name: "Cert bad DER", header: "Cert=-----BEGIN+CERTIFICATE-----%0AAAAA%0A-----END+CERTIFICATE-----", want: contract.ReasonInvalidCertificate},
		{name: "expired", header: gatewayXFCC(c.expired), want: contract.ReasonInvalidCertificate},
		{name: "not yet valid", header: gatewayXFCC(c.notYet), want: contract.ReasonInvalidCertificate},
		{name: "no CN", header: gatewayXFCC(c.noCN), want: contract.ReasonInvalidCertificate},
		{name: "two CNs", header: gatewayXFCC(c.twoCNs), want: contract.ReasonInvalidCertificate},
		{name: "no CN, Subject pair claims one", header: strings.Replace(gatewayXFCC(c.noCN), `Subject="CN="`, `Subject="CN=runtime-1"`, 1), want: contract.ReasonInvalidCertificate},
		{name: "other CA with CA configured", header: gatewayXFCC(c.otherCASigned), roots: true, want: contract.ReasonInvalidCertificate},
		{name: "150 SANs", header: gatewayXFCC(c.sans150), want: contract.ReasonTooManySANs},
		{name: "101 SANs of DNS, URI and IP", header: gatewayXFCC(c.sans101Mixed), want: contract.ReasonTooManySANs},
		{name: "source certificate differs", header: good, source: string(c.twin.CertPEM), want: contract.ReasonCertificateMismatch},
		{name: "source certificate unparsable", header: good, source: "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n", want: contract.ReasonInvalidCertificate},
		{name: "unknown runtime", header: gatewayXFCC(c.unknown), want: contract.ReasonUnknownRuntime},
		{name: "annotation missing", header: gatewayXFCC(c.noDomain), want: contract.ReasonDomainNotSet},
		{name: "annotation blank", header: gatewayXFCC(c.emptyDomain), want: contract.ReasonDomainNotSet},
		{name: "SAN mismatch", header: gatewayXFCC(c.mismatch), want: contract.ReasonSANMismatch},
		{name: "SAN mismatch, header DNS pair forged", header: gatewayXFCC(c.mismatch) + ";DNS=skr1.example.com", want: contract.ReasonSANMismatch},
		{name: "URI SAN smuggles ;DNS=", header: gatewayXFCC(c.smuggle), want: contract.ReasonSANMismatch},
		{name: "wildcard SAN never matches", header: gatewayXFCC(c.wildcard), want: contract.ReasonSANMismatch},
		{name: "wildcard annotation never matches", header: gatewayXFCC(wildKyma), want: contract.ReasonSANMismatch},
		{name: "annotation not a DNS name", header: gatewayXFCC(badKyma), want: contract.ReasonSANMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := &identity.Verifier{Lookup: lookup}
			if tt.roots {
				v.Roots = c.ca.Pool()
			}
			// The second round answers from the decoded-certificate cache.
			for round := range 2 {
				id, err := v.Verify(context.Background(), tt.header, tt.source)
				if tt.want == "" {
					if err != nil {
						t.Fatalf("round %d: want allow, got %v", round, err)
					}
					if want := sha256.Sum256(certOf(t, tt.header).Raw); id.Fingerprint != want {
						t.Fatalf("round %d: fingerprint %x, want the certificate's SHA-256 %x", round, id.Fingerprint, want)
					}
					if id.RuntimeID != tt.wantID.RuntimeID || id.SKRDomain != tt.wantID.SKRDomain {
						t.Fatalf("round %d: identity %+v, want %+v", round, id, tt.wantID)
					}
					continue
				}
				var d *identity.Denial
				if !errors.As(err, &d) {
					t.Fatalf("round %d: want denial %s, got %v (identity %+v)", round, tt.want, err, id)
				}
				if d.Reason != tt.want || d.Message == "" {
					t.Fatalf("round %d: want denial %s, got %s: %q", round, tt.want, d.Reason, d.Message)
				}
				if id.SKRDomain != "" {
					t.Fatalf("round %d: denied with an SKR domain in the identity: %+v", round, id)
				}
			}
		})
	}
	// The header of the URI-smuggling certificate really carries the forged
	// pair, so the case above proves the pair is ignored.
	if elems, err := xfcc.Parse(gatewayXFCC(c.smuggle)); err != nil || !containsString(elems[0].Values("DNS"), "skr1.example.com") {
		t.Fatalf("smuggling header does not carry DNS=skr1.example.com: %v", err)
	}
}

func TestVerifyClock(t *testing.T) {
	c := newCerts(t)
	v := &identity.Verifier{Lookup: mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {SKRDomain: "skr1.example.com"}}}}
	for _, tc := range []struct {
		now  time.Time
		want bool
	}{
		{c.good.Cert.NotBefore.Add(-time.Second), false},
		{c.good.Cert.NotBefore, true},
		{c.good.Cert.NotAfter, true},
		{c.good.Cert.NotAfter.Add(time.Second), false},
	} {
		v.Now = func() time.Time { return tc.now }
		_, err := v.Verify(context.Background(), gatewayXFCC(c.good), "")
		var d *identity.Denial
		if tc.want && err != nil || !tc.want && (!errors.As(err, &d) || d.Reason != contract.ReasonInvalidCertificate) {
			t.Errorf("at %s: got %v, want allowed=%v", tc.now, err, tc.want)
		}
	}
}

// TestVerifyRootsWindow: a chain verified once is trusted from the cache
// only while every certificate of the chain is valid.
func TestVerifyRootsWindow(t *testing.T) {
	ca, err := pki.NewCA("short-lived-ca")
	if err != nil {
		t.Fatal(err)
	}
	// The leaf outlives its CA by a day.
	leaf := issue(t, ca, pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}, NotAfter: ca.Cert.NotAfter.Add(24 * time.Hour)})
	now := time.Now()
	v := &identity.Verifier{
		Lookup: mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {SKRDomain: "skr1.example.com"}}},
		Roots:  ca.Pool(),
		Now:    func() time.Time { return now },
	}
	if _, err := v.Verify(context.Background(), gatewayXFCC(leaf), ""); err != nil {
		t.Fatalf("within the CA's validity: %v", err)
	}
	now = ca.Cert.NotAfter.Add(time.Hour)
	var d *identity.Denial
	if _, err := v.Verify(context.Background(), gatewayXFCC(leaf), ""); !errors.As(err, &d) || d.Reason != contract.ReasonInvalidCertificate {
		t.Fatalf("after the CA expired: got %v, want invalid-certificate", err)
	}
}

func TestVerifyLookupErrorFailsClosed(t *testing.T) {
	c := newCerts(t)
	boom := errors.New("cache broken")
	v := &identity.Verifier{Lookup: mapLookup{err: boom}}
	_, err := v.Verify(context.Background(), gatewayXFCC(c.good), "")
	var d *identity.Denial
	if !errors.Is(err, boom) || errors.As(err, &d) {
		t.Fatalf("want the lookup error (not a denial), got %v", err)
	}
	if _, err := (&identity.Verifier{}).Verify(context.Background(), gatewayXFCC(c.good), ""); !errors.Is(err, identity.ErrNoLookup) {
		t.Fatalf("nil Lookup: got %v", err)
	}
}

func TestNormalizeDomain(t *testing.T) {
	for in, want := range map[string]string{
		"SKR.Example.com.": "skr.example.com",
		" skr.example.com": "skr.example.com",
		".":                "",
		"":                 "",
		"\u212Aa.com":      "\u212Aa.com", // Kelvin sign is not folded to 'k'
	} {
		if got := identity.NormalizeDomain(in); got != want {
			t.Errorf("NormalizeDomain(%q) = %q, want %q", in, got, want)
		}
	}
}

func containsString(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

// Example verifies the header an Istio gateway sets for an SKR's client
// certificate against the runtime's Kyma CR.
func Example() {
	ca, _ := pki.NewCA("example-ca")
	leaf, _ := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}})
	v := &identity.Verifier{Lookup: mapLookup{runtimes: map[string]identity.Runtime{
		"runtime-1": {ID: "runtime-1", SKRDomain: "SKR1.example.com."},
	}}}

	id, err := v.Verify(context.Background(), `Hash=1;Cert="`+xfcc.EncodeCert(leaf.CertPEM)+`";URI=`, "")
	fmt.Println(id.RuntimeID, id.SKRDomain, err)

	_, err = v.Verify(context.Background(), "", "")
	var d *identity.Denial
	if errors.As(err, &d) {
		fmt.Println(d.Reason)
	}
	// Output:
	// runtime-1 skr1.example.com <nil>
	// missing-client-cert
}

// FuzzIsDNS1123Subdomain: the regexp-free check agrees with apimachinery's.
func FuzzIsDNS1123Subdomain(f *testing.F) {
	for _, s := range []string{"", "a", "skr.example.com", "-a", "a-", "a..b", ".a", "a.", "A.com", "a_b", strings.Repeat("a", 254), "1-2.3-4", "xn--bcher-kva.example"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want := len(validation.IsDNS1123Subdomain(s)) == 0
		if got := identity.IsDNS1123Subdomain(s); got != want {
			t.Fatalf("isDNS1123Subdomain(%q) = %v, apimachinery says %v", s, got, want)
		}
	})
}

// TestVerifyConcurrent: one Verifier (and its certificate cache) used from
// many goroutines gives every caller its own identity (run with -race).
func TestVerifyConcurrent(t *testing.T) {
	ca, err := pki.NewCA("concurrent-ca")
	if err != nil {
		t.Fatal(err)
	}
	lookup := mapLookup{runtimes: map[string]identity.Runtime{}}
	var headers []string
	for i := range 32 {
		id, domain := fmt.Sprintf("runtime-%d", i), fmt.Sprintf("skr-%d.example.com", i)
		lookup.runtimes[id] = identity.Runtime{ID: id, SKRDomain: domain}
		headers = append(headers, gatewayXFCC(issue(t, ca, pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})))
	}
	v := &identity.Verifier{Lookup: lookup}
	errs := make(chan error, 8)
	for w := range 8 {
		go func() {
			for n := range 200 {
				i := (w*7 + n) % len(headers)
				id, err := v.Verify(context.Background(), headers[i], "")
				if err == nil && id.RuntimeID != fmt.Sprintf("runtime-%d", i) {
					err = fmt.Errorf("request of runtime-%d verified as %+v", i, id)
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
