package identity_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// TestVerifyRetired: a runtime's certificate issued before its Kyma's
// retirement is refused as revoked once the retirement is in effect (and
// at once when it is older than Always); the current and newer ones pass;
// an unreadable annotation refuses every certificate.
func TestVerifyRetired(t *testing.T) {
	ca := pki.MustCA(t, "revocation-ca")
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	leaf := func(nb time.Time) *pki.Leaf {
		return issue(t, ca, pki.LeafOptions{CommonName: "rt", DNSNames: []string{"rt.example.com"}, NotBefore: nb, NotAfter: nb.Add(24 * time.Hour)})
	}
	old, prev, cur, next := leaf(t0), leaf(t0.Add(time.Hour)), leaf(t0.Add(2*time.Hour)), leaf(t0.Add(3*time.Hour))
	retire := contract.Retirement{Always: t0.Add(time.Hour), IssuedBefore: t0.Add(2 * time.Hour), From: t0.Add(2*time.Hour + 10*time.Minute + 300*time.Millisecond)}
	for _, tc := range []struct {
		name       string
		annotation string
		leaf       *pki.Leaf
		now        time.Time
		revoked    bool
	}{
		{"no retirement", "", old, t0.Add(4 * time.Hour), false},
		{"older than Always: refused during the overlap", retire.String(), old, t0.Add(2 * time.Hour), true},
		{"the previous certificate during the overlap", retire.String(), prev, t0.Add(2*time.Hour + 10*time.Minute), false},
		{"the previous certificate within the second From falls in", retire.String(), prev, t0.Add(2*time.Hour + 10*time.Minute + 500*time.Millisecond), false},
		{"the previous certificate once From passed", retire.String(), prev, t0.Add(2*time.Hour + 10*time.Minute + time.Second), true},
		{"the current certificate", retire.String(), cur, t0.Add(5 * time.Hour), false},
		{"a newer certificate", retire.String(), next, t0.Add(5 * time.Hour), false},
		{"unreadable annotation", "{not json", cur, t0.Add(5 * time.Hour), true},
		{"oversized annotation", `{"issuedBefore":"` + strings.Repeat("9", 600) + `"}`, cur, t0.Add(5 * time.Hour), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := identity.Runtime{ID: "rt", KymaName: "rt", SKRDomain: "rt.example.com", Retired: pinning.RetirementOf(tc.annotation)}
			v := &identity.Verifier{Lookup: mapLookup{runtimes: map[string]identity.Runtime{"rt": rt}}, Now: func() time.Time { return tc.now }}
			id, err := v.Verify(context.Background(), gatewayXFCC(tc.leaf), "")
			var d *identity.Denial
			switch {
			case tc.revoked && (!errors.As(err, &d) || d.Reason != contract.ReasonRevoked):
				t.Fatalf("got %v, want %s", err, contract.ReasonRevoked)
			case !tc.revoked && err != nil:
				t.Fatalf("got %v, want allowed", err)
			case tc.revoked && id.RuntimeID != "rt":
				t.Errorf("a refusal names runtime %q for the log, want rt", id.RuntimeID)
			}
		})
	}
}

// TestVerifyDeletingKyma: a runtime whose Kyma is being deleted (held by
// a finalizer) is refused as unknown-runtime.
func TestVerifyDeletingKyma(t *testing.T) {
	c := newCerts(t)
	v := &identity.Verifier{Lookup: mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {SKRDomain: "skr1.example.com", Deleting: true}}}}
	_, err := v.Verify(context.Background(), gatewayXFCC(c.good), "")
	var d *identity.Denial
	if !errors.As(err, &d) || d.Reason != contract.ReasonUnknownRuntime {
		t.Fatalf("got %v, want %s", err, contract.ReasonUnknownRuntime)
	}
}

// TestRetirementAnnotation: the annotation vs-controller writes reads back
// as written, and Retired agrees with what SAN pinning decides.
func TestRetirementAnnotation(t *testing.T) {
	r := contract.Retirement{IssuedBefore: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC), From: time.Date(2026, 1, 2, 3, 14, 5, 0, time.UTC)}
	got, err := contract.ParseRetirement(r.String())
	if err != nil || !got.IssuedBefore.Equal(r.IssuedBefore) || !got.From.Equal(r.From) || !got.Always.IsZero() {
		t.Fatalf("ParseRetirement(%s) = %+v, %v", r, got, err)
	}
	if strings.Contains(r.String(), "always") {
		t.Errorf("a zero Always is written: %s", r)
	}
	if !r.Retired(r.IssuedBefore.Add(-time.Second), r.From) || r.Retired(r.IssuedBefore.Add(-time.Second), r.From.Add(-time.Second)) || r.Retired(r.IssuedBefore, r.From) {
		t.Error("Retired disagrees with the retirement")
	}
}

// TestVerifyAdvisoryCertificates: the odd certificates of Envoy's 2025-26
// advisories (issue 42; the e2e spec "Envoy's advisories as specs" sends
// them through the real gateway) are refused or allowed as the one
// runtime they name, whatever the header's DNS= and Subject= pairs say.
func TestVerifyAdvisoryCertificates(t *testing.T) {
	ca := pki.MustCA(t, "advisory-ca")
	lookup := mapLookup{runtimes: map[string]identity.Runtime{
		"rt":     {ID: "rt", KymaName: "rt", SKRDomain: "rt.example.com"},
		"victim": {ID: "victim", KymaName: "victim", SKRDomain: "victim.example.com"},
	}}
	v := &identity.Verifier{Lookup: lookup}
	for _, tc := range []struct {
		name string
		o    pki.LeafOptions
		want contract.DenyReason // "" allowed as rt
	}{
		{"NUL inside the SAN", pki.LeafOptions{CommonName: "rt", DNSNames: []string{"rt.example.com\x00.attacker.example.com"}}, contract.ReasonSANMismatch},
		{"NUL inside the CN", pki.LeafOptions{CommonName: "rt\x00.attacker", DNSNames: []string{"rt.example.com"}}, contract.ReasonUnknownRuntime},
		{"CN and SAN disagree", pki.LeafOptions{CommonName: "rt", DNSNames: []string{"victim.example.com"}}, contract.ReasonSANMismatch},
		{"duplicate SANs", pki.LeafOptions{CommonName: "rt", DNSNames: []string{"rt.example.com", "rt.example.com", "RT.EXAMPLE.COM"}}, ""},
		{"CN as BMPString", pki.LeafOptions{CommonName: "rt", CommonNameBMP: true, DNSNames: []string{"rt.example.com"}}, ""},
		{"SAN in XFCC syntax", pki.LeafOptions{CommonName: "victim", DNSNames: []string{"rt.example.com;DNS=victim.example.com", `x",DNS=victim.example.com`, "x=y,DNS=victim.example.com"}}, contract.ReasonSANMismatch},
		{"CN in XFCC syntax", pki.LeafOptions{CommonName: `victim";DNS=victim.example.com,By=rt`, DNSNames: []string{"rt.example.com"}}, contract.ReasonUnknownRuntime},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := issue(t, ca, tc.o)
			// The Cert alone decides, whatever DNS= pair claims the victim.
			header := `Hash=0;Cert="` + xfcc.EncodeCert(l.CertPEM) + `";DNS=victim.example.com`
			id, err := v.Verify(context.Background(), header, "")
			var d *identity.Denial
			switch {
			case tc.want == "" && (err != nil || id.RuntimeID != "rt" || id.SKRDomain != "rt.example.com"):
				t.Fatalf("got %+v, %v; want allowed as rt", id, err)
			case tc.want != "" && (!errors.As(err, &d) || d.Reason != tc.want):
				t.Fatalf("got %v, want %s", err, tc.want)
			}
			// A gateway that copied the names into Subject= and DNS=
			// unescaped: refused all the same (a NUL or a stray quote
			// makes the header malformed-xfcc).
			if _, err := v.Verify(context.Background(), gatewayXFCC(l), ""); tc.want != "" && !errors.As(err, &d) {
				t.Fatalf("names copied into the header: got %v, want a refusal", err)
			}
		})
	}
}
