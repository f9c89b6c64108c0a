package listener_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

// fakeLookup stands in for the Kyma cache: runtimes by ID, or an error.
type fakeLookup struct {
	runtimes map[string]identity.Runtime
	err      error
}

func (f fakeLookup) LookupRuntime(_ context.Context, id string) (identity.Runtime, bool, error) {
	if f.err != nil {
		return identity.Runtime{}, false, f.err
	}
	rt, ok := f.runtimes[id]
	return rt, ok, nil
}

// TestSANPinning is identity mode b: the shared pinning code verifies the
// XFCC header in process; certificates from test/pki, the header as Envoy
// builds it.
func TestSANPinning(t *testing.T) {
	ca, err := pki.NewCA("skr-ca")
	if err != nil {
		t.Fatal(err)
	}
	issue := func(o pki.LeafOptions) *pki.Leaf {
		l, err := ca.Issue(o)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	good := issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"skr-webhook.kyma-system.svc", "a.skr.example.com"}})
	mismatch := issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"b.skr.example.com"}})
	unknown := issue(pki.LeafOptions{CommonName: "runtime-x", DNSNames: []string{"a.skr.example.com"}})
	noDomain := issue(pki.LeafOptions{CommonName: "runtime-n", DNSNames: []string{"n.skr.example.com"}})
	expired := issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"a.skr.example.com"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	otherCA, err := pki.NewCA("other-ca")
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := otherCA.Issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"a.skr.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	runtimes := fakeLookup{runtimes: map[string]identity.Runtime{
		"runtime-a": {ID: "runtime-a", SKRDomain: "A.skr.example.com."},
		"runtime-n": {ID: "runtime-n"},
	}}

	cases := []struct {
		name       string
		lookup     identity.RuntimeLookup
		hdr        []string // key, value pairs
		want       int
		wantReason contract.DenyReason
	}{
		{"valid certificate", runtimes, []string{contract.HeaderXFCC, envoyXFCC(good)}, http.StatusOK, ""},
		{"forged runtime-id header is ignored", runtimes, []string{contract.HeaderXFCC, envoyXFCC(good), contract.HeaderRuntimeID, "runtime-evil"}, http.StatusOK, ""},
		{"no XFCC", runtimes, nil, http.StatusUnauthorized, contract.ReasonMissingClientCert},
		{"runtime-id header without XFCC", runtimes, []string{contract.HeaderRuntimeID, "runtime-a"}, http.StatusUnauthorized, contract.ReasonMissingClientCert},
		{"SAN mismatch", runtimes, []string{contract.HeaderXFCC, envoyXFCC(mismatch)}, http.StatusForbidden, contract.ReasonSANMismatch},
		{"unknown runtime", runtimes, []string{contract.HeaderXFCC, envoyXFCC(unknown)}, http.StatusForbidden, contract.ReasonUnknownRuntime},
		{"domain not set", runtimes, []string{contract.HeaderXFCC, envoyXFCC(noDomain)}, http.StatusForbidden, contract.ReasonDomainNotSet},
		{"expired certificate", runtimes, []string{contract.HeaderXFCC, envoyXFCC(expired)}, http.StatusForbidden, contract.ReasonInvalidCertificate},
		{"certificate of another CA", runtimes, []string{contract.HeaderXFCC, envoyXFCC(foreign)}, http.StatusForbidden, contract.ReasonInvalidCertificate},
		{"two XFCC elements", runtimes, []string{contract.HeaderXFCC, envoyXFCC(good) + "," + envoyXFCC(mismatch)}, http.StatusForbidden, contract.ReasonMalformedXFCC},
		{"two XFCC headers", runtimes, []string{contract.HeaderXFCC, envoyXFCC(good), contract.HeaderXFCC, envoyXFCC(good)}, http.StatusForbidden, contract.ReasonMalformedXFCC},
		{"XFCC without Cert", runtimes, []string{contract.HeaderXFCC, `Hash=abc;Subject="CN=runtime-a";DNS=a.skr.example.com`}, http.StatusForbidden, contract.ReasonMalformedXFCC},
		{"XFCC over 32 KiB", runtimes, []string{contract.HeaderXFCC, envoyXFCC(good) + ";By=" + strings.Repeat("x", contract.MaxXFCCBytes)}, http.StatusForbidden, contract.ReasonMalformedXFCC},
		{"lookup fails", fakeLookup{err: errors.New("cache not synced")}, []string{contract.HeaderXFCC, envoyXFCC(good)}, http.StatusServiceUnavailable, contract.ReasonNotReady},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			v := &identity.Verifier{Lookup: tc.lookup, Roots: ca.Pool()}
			s := start(t, listener.WithSANPinning(v))
			resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(tc.hdr...))
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, text, tc.want)
			}
			if tc.want == http.StatusOK {
				ev, ok := listener.EventFrom(nextEvent(t, s.l.Events()).Object)
				if !ok || ev.RuntimeID != "runtime-a" {
					t.Fatalf("event %+v, want runtime ID from the certificate CN", ev)
				}
				return
			}
			noEvent(t, s.l.Events())
			checkDenial(t, resp, text, tc.wantReason)
			if tc.want == http.StatusServiceUnavailable && resp.Header.Get("Retry-After") == "" {
				t.Error("503 without Retry-After")
			}
		})
	}
}

// checkDenial checks the deny header and JSON body of a refusal.
func checkDenial(t *testing.T, resp *http.Response, text string, reason contract.DenyReason) {
	t.Helper()
	if got := resp.Header.Get(contract.HeaderDenyReason); got != string(reason) {
		t.Errorf("%s %q, want %q", contract.HeaderDenyReason, got, reason)
	}
	var db contract.DenyBody
	if err := json.Unmarshal([]byte(text), &db); err != nil {
		t.Fatalf("deny body %q: %v", text, err)
	}
	if db.Reason != reason || db.Message == "" {
		t.Errorf("deny body %+v, want reason %q and a message", db, reason)
	}
}

// slowVerifier never answers before its context ends.
type slowVerifier struct{}

func (slowVerifier) Verify(ctx context.Context, _, _ string) (identity.Identity, error) {
	<-ctx.Done()
	return identity.Identity{}, ctx.Err()
}

// TestSANPinningTimeout: a verification that hangs answers 503 after the
// verify timeout, never allows.
func TestSANPinningTimeout(t *testing.T) {
	s := start(t, listener.WithSANPinning(slowVerifier{}), listener.WithVerifyTimeout(20*time.Millisecond))
	resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderXFCC, "Cert=\"x\""))
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("status %d, want 503", resp.StatusCode)
	}
	checkDenial(t, resp, text, contract.ReasonNotReady)
	noEvent(t, s.l.Events())
}

// TestVerifyFunc is identity mode c.
func TestVerifyFunc(t *testing.T) {
	cases := []struct {
		name       string
		id         string
		err        error
		want       int
		wantReason contract.DenyReason
	}{
		{"accepted", "runtime-c", nil, http.StatusOK, ""},
		{"unauthenticated", "", fmt.Errorf("no token: %w", listener.ErrUnauthenticated), http.StatusUnauthorized, ""},
		{"unavailable", "", fmt.Errorf("backend down: %w", listener.ErrUnavailable), http.StatusServiceUnavailable, contract.ReasonNotReady},
		{"denial", "", &identity.Denial{Reason: contract.ReasonSANMismatch, Message: "no"}, http.StatusForbidden, contract.ReasonSANMismatch},
		{"missing certificate denial", "", &identity.Denial{Reason: contract.ReasonMissingClientCert, Message: "no cert"}, http.StatusUnauthorized, contract.ReasonMissingClientCert},
		{"other error", "", errors.New("not on the list"), http.StatusForbidden, ""},
		{"empty runtime ID", "", nil, http.StatusForbidden, ""},
		{"invalid runtime ID", "a/b", nil, http.StatusForbidden, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var seen string
			verify := func(r *http.Request) (string, error) {
				seen = r.Header.Get("X-Token")
				if _, ok := r.Context().Deadline(); !ok {
					return "", errors.New("no deadline on the request context")
				}
				return tc.id, tc.err
			}
			s := start(t, listener.WithVerifyFunc(verify))
			resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr("X-Token", "t0k3n"))
			if resp.StatusCode != tc.want {
				t.Fatalf("status %d (%s), want %d", resp.StatusCode, text, tc.want)
			}
			if seen != "t0k3n" {
				t.Errorf("verify func saw header %q", seen)
			}
			if tc.want == http.StatusOK {
				ev, ok := listener.EventFrom(nextEvent(t, s.l.Events()).Object)
				if !ok || ev.RuntimeID != tc.id {
					t.Fatalf("event %+v", ev)
				}
				return
			}
			noEvent(t, s.l.Events())
			if tc.wantReason != "" {
				checkDenial(t, resp, text, tc.wantReason)
			} else if got := resp.Header.Get(contract.HeaderDenyReason); got != "" {
				t.Errorf("unexpected deny reason %q", got)
			}
		})
	}
}

// TestClientCAFile: with WithClientCAFile the pinning verifier's roots are
// the file's CAs, and a changed file is used while the listener runs (a CA
// rotation: trust moves from one CA to the next without a restart).
func TestClientCAFile(t *testing.T) {
	g := gomega.NewWithT(t)
	caA, err := pki.NewCA("ca-a")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	caB, err := pki.NewCA("ca-b")
	g.Expect(err).NotTo(gomega.HaveOccurred())
	leafOf := func(ca *pki.CA) *pki.Leaf {
		l, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"a.skr.example.com"}})
		g.Expect(err).NotTo(gomega.HaveOccurred())
		return l
	}
	fromA, fromB := leafOf(caA), leafOf(caB)
	vol, err := volume.New(filepath.Join(t.TempDir(), "ca"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(vol.Write(map[string][]byte{"ca.crt": caA.PEM})).To(gomega.Succeed())
	lookup := fakeLookup{runtimes: map[string]identity.Runtime{"runtime-a": {ID: "runtime-a", SKRDomain: "a.skr.example.com"}}}

	for _, opts := range [][]listener.Option{
		{listener.WithClientCAFile(vol.File("ca.crt"))},                                                               // no SAN pinning
		{listener.WithSANPinning(slowVerifier{}), listener.WithClientCAFile(vol.File("ca.crt"))},                      // cannot take roots
		{listener.WithSANPinning(&identity.Verifier{Lookup: lookup}), listener.WithClientCAFile(vol.File("missing"))}, // unreadable
		{listener.WithClientCAFile("")},
	} {
		if _, err := listener.New(":0", testManager, append(opts, listener.WithRegisterer(prometheus.NewRegistry()))...); err == nil {
			t.Errorf("New accepted %d options with an unusable client CA file", len(opts))
		}
	}

	s := start(t, listener.WithSANPinning(&identity.Verifier{Lookup: lookup}), listener.WithClientCAFile(vol.File("ca.crt")))
	status := func(l *pki.Leaf) func() int {
		return func() int {
			resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderXFCC, envoyXFCC(l)))
			return resp.StatusCode
		}
	}
	g.Expect(status(fromA)()).To(gomega.Equal(http.StatusOK))
	g.Expect(status(fromB)()).To(gomega.Equal(http.StatusForbidden))
	g.Expect(vol.Write(map[string][]byte{"ca.crt": caB.PEM})).To(gomega.Succeed())
	g.Eventually(status(fromB)).WithTimeout(15 * time.Second).Should(gomega.Equal(http.StatusOK))
	g.Expect(status(fromA)()).To(gomega.Equal(http.StatusForbidden))
}
