package listener_test

import (
	"crypto/ed25519"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

// signingKey is an Ed25519 key and its key set file content (PUBLIC KEY).
func signingKey(t *testing.T) (ed25519.PrivateKey, []byte) {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return priv, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der})
}

// signedHeaders are the headers ext-authz's allow leaves on a request of
// runtime id to path, signed by s.
func signedHeaders(s *assertion.Signer, id, domain, path string) http.Header {
	return hdr(contract.HeaderRuntimeID, id, contract.HeaderSKRDomain, domain,
		contract.HeaderIdentitySignature, s.Sign(assertion.Claims{RuntimeID: id, SKRDomain: domain, Method: http.MethodPost, Path: path}))
}

// TestIdentitySignature: with WithIdentityKeyFile a request is taken only
// with ext-authz's signature over its identity headers, method and path —
// the attacks of a route bound to the gateway (set the runtime ID, rewrite
// a tenant path, drop the signature) are refused and counted.
func TestIdentitySignature(t *testing.T) {
	g := gomega.NewWithT(t)
	priv, set := signingKey(t)
	vol, err := volume.New(filepath.Join(t.TempDir(), "keys"))
	g.Expect(err).NotTo(gomega.HaveOccurred())
	g.Expect(vol.Write(map[string][]byte{"tls.crt": set})).To(gomega.Succeed())
	signer := assertion.NewSigner(priv, time.Nanosecond, nil)

	for _, opts := range [][]listener.Option{
		{listener.WithIdentityKeyFile(vol.File("missing"))},
		{listener.WithIdentityKeyFile("")},
		{listener.WithIdentityKeyFile(vol.File("tls.crt")), listener.WithoutIdentitySignature()},
	} {
		if _, err := listener.New(":0", testManager, append(opts, listener.WithRegisterer(prometheus.NewRegistry()))...); err == nil {
			t.Errorf("New accepted %d options with an unusable identity key file", len(opts))
		}
	}

	s := start(t, listener.WithIdentityKeyFile(vol.File("tls.crt")))
	g.Expect(metricValue(t, s.reg, listener.MetricSignatureVerified, nil)).To(gomega.Equal(1.0))
	path := s.l.Path()
	resp, text := s.do(t, http.MethodPost, path, body(validBody), signedHeaders(signer, "runtime-1", "skr-1.example.com", path))
	g.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), text)
	ev, ok := listener.EventFrom(nextEvent(t, s.l.Events()).Object)
	g.Expect(ok).To(gomega.BeTrue())
	g.Expect(ev.RuntimeID).To(gomega.Equal("runtime-1"))

	_, otherSet := signingKey(t)
	otherPriv, _ := signingKey(t)
	stale := assertion.NewSigner(priv, 0, func() time.Time { return time.Now().Add(-assertion.Validity - 2*time.Second) })
	routeSet := signedHeaders(signer, "runtime-2", "skr-2.example.com", path)
	routeSet.Set(contract.HeaderRuntimeID, "runtime-1") // a route's headers.request.set after ext_authz
	noSig := signedHeaders(signer, "runtime-1", "skr-1.example.com", path)
	noSig.Del(contract.HeaderIdentitySignature)
	for _, tc := range []struct {
		name   string
		h      http.Header
		status int
		reason contract.DenyReason
	}{
		{"no signature (a route removed it, or Kyma's gateway)", noSig, http.StatusUnauthorized, contract.ReasonSignatureMissing},
		{"runtime ID set by a route", routeSet, http.StatusForbidden, contract.ReasonSignatureInvalid},
		{"a tenant path rewritten to this one", signedHeaders(signer, "runtime-2", "skr-2.example.com", "/tenant/operator"), http.StatusForbidden, contract.ReasonSignatureInvalid},
		{"signed too long ago", signedHeaders(stale, "runtime-1", "skr-1.example.com", path), http.StatusForbidden, contract.ReasonSignatureExpired},
		{"another key", signedHeaders(assertion.NewSigner(otherPriv, 0, nil), "runtime-1", "skr-1.example.com", path), http.StatusForbidden, contract.ReasonSignatureUnknownKey},
		{"malformed", hdr(contract.HeaderRuntimeID, "runtime-1", contract.HeaderIdentitySignature, "v1;t=1"), http.StatusForbidden, contract.ReasonSignatureMalformed},
	} {
		before := metricValue(t, s.reg, listener.MetricSignatureRefused, map[string]string{"reason": string(tc.reason)})
		resp, text := s.do(t, http.MethodPost, path, body(validBody), tc.h)
		if resp.StatusCode != tc.status {
			t.Errorf("%s: status %d, want %d (%s)", tc.name, resp.StatusCode, tc.status, text)
			continue
		}
		checkDenial(t, resp, text, tc.reason)
		if got := metricValue(t, s.reg, listener.MetricSignatureRefused, map[string]string{"reason": string(tc.reason)}); got != before+1 {
			t.Errorf("%s: refusals of reason %s %v, want %v", tc.name, tc.reason, got, before+1)
		}
	}
	noEvent(t, s.l.Events())

	// Rotation: the key set file changes; the key before stays accepted,
	// the new one is accepted once the file is reloaded.
	newPriv, newSet := signingKey(t)
	newSigner := assertion.NewSigner(newPriv, 0, nil)
	g.Expect(vol.Write(map[string][]byte{"tls.crt": append(newSet, otherSet...)})).To(gomega.Succeed())
	g.Eventually(func() int {
		resp, _ := s.do(t, http.MethodPost, path, body(validBody), signedHeaders(newSigner, "runtime-1", "skr-1.example.com", path))
		return resp.StatusCode
	}).WithTimeout(15 * time.Second).Should(gomega.Equal(http.StatusOK))
	resp, text = s.do(t, http.MethodPost, path, body(validBody), signedHeaders(signer, "runtime-1", "skr-1.example.com", path))
	g.Expect(resp.StatusCode).To(gomega.Equal(http.StatusOK), "the previous key after a rotation: "+text)
}

// TestIdentitySignatureSANPinning: in identity mode b a route that sets
// x-forwarded-client-cert to another runtime's (public) certificate pins
// that runtime, but ext-authz signed the runtime of the real certificate:
// refused.
func TestIdentitySignatureSANPinning(t *testing.T) {
	ca, err := pki.NewCA("skr-ca")
	if err != nil {
		t.Fatal(err)
	}
	one, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr-1.example.com"}})
	if err != nil {
		t.Fatal(err)
	}
	priv, set := signingKey(t)
	vol, err := volume.New(filepath.Join(t.TempDir(), "keys"))
	if err != nil {
		t.Fatal(err)
	}
	if err := vol.Write(map[string][]byte{"tls.crt": set}); err != nil {
		t.Fatal(err)
	}
	lookup := fakeLookup{runtimes: map[string]identity.Runtime{
		"runtime-1": {ID: "runtime-1", SKRDomain: "skr-1.example.com"}, "runtime-2": {ID: "runtime-2", SKRDomain: "skr-2.example.com"},
	}}
	s := start(t, listener.WithSANPinning(&identity.Verifier{Lookup: lookup}), listener.WithIdentityKeyFile(vol.File("tls.crt")))
	signer := assertion.NewSigner(priv, 0, nil)
	path := s.l.Path()

	h := signedHeaders(signer, "runtime-1", "skr-1.example.com", path)
	h.Set(contract.HeaderXFCC, envoyXFCC(one))
	if resp, text := s.do(t, http.MethodPost, path, body(validBody), h); resp.StatusCode != http.StatusOK {
		t.Fatalf("runtime-1 with its certificate and signature: %d %s", resp.StatusCode, text)
	}
	nextEvent(t, s.l.Events())

	h = signedHeaders(signer, "runtime-2", "skr-2.example.com", path) // ext-authz saw runtime-2's certificate
	h.Set(contract.HeaderXFCC, envoyXFCC(one))                        // a route set runtime-1's
	resp, text := s.do(t, http.MethodPost, path, body(validBody), h)
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("XFCC set by a route: %d %s", resp.StatusCode, text)
	}
	checkDenial(t, resp, text, contract.ReasonSignatureInvalid)
	noEvent(t, s.l.Events())
}
