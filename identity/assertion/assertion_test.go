package assertion_test

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

func newKey(t testing.TB) ed25519.PrivateKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return priv
}

func pub(k ed25519.PrivateKey) ed25519.PublicKey { return k.Public().(ed25519.PublicKey) }

var claims = assertion.Claims{RuntimeID: "runtime-1", SKRDomain: "skr-1.example.com", Method: "POST", Path: "/v2/example-operator/event"}

func reason(err error) contract.DenyReason {
	var r *assertion.Refusal
	if errors.As(err, &r) {
		return r.Reason
	}
	return ""
}

func TestSignVerify(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1764355200, 0))
	k := newKey(t)
	s := assertion.NewSigner(k, 0, clk.Now)
	v := assertion.NewVerifier([]ed25519.PublicKey{pub(k)}, clk.Now)
	h := s.Sign(claims)
	if len(h) > assertion.MaxHeaderBytes || !strings.HasPrefix(h, "v1;t=1764355200;k="+assertion.IDOf(pub(k)).String()+";s=") {
		t.Fatalf("header %q", h)
	}
	if err := v.Verify(h, claims); err != nil {
		t.Fatalf("own signature refused: %v", err)
	}

	// Every claim is signed: a change of any one is refused.
	for name, c := range map[string]assertion.Claims{
		"runtime ID":        {RuntimeID: "runtime-2", SKRDomain: claims.SKRDomain, Method: claims.Method, Path: claims.Path},
		"SKR domain":        {RuntimeID: claims.RuntimeID, SKRDomain: "skr-2.example.com", Method: claims.Method, Path: claims.Path},
		"method":            {RuntimeID: claims.RuntimeID, SKRDomain: claims.SKRDomain, Method: "PUT", Path: claims.Path},
		"path":              {RuntimeID: claims.RuntimeID, SKRDomain: claims.SKRDomain, Method: claims.Method, Path: "/v2/other-operator/event"},
		"query":             {RuntimeID: claims.RuntimeID, SKRDomain: claims.SKRDomain, Method: claims.Method, Path: claims.Path + "?x=1"},
		"moved between two": {RuntimeID: claims.RuntimeID + "skr-1", SKRDomain: ".example.com", Method: claims.Method, Path: claims.Path},
	} {
		if got := reason(v.Verify(h, c)); got != contract.ReasonSignatureInvalid {
			t.Errorf("%s changed: reason %q, want %q", name, got, contract.ReasonSignatureInvalid)
		}
	}

	// Tampered header fields.
	parsed, err := assertion.ParseHeader(h)
	if err != nil {
		t.Fatal(err)
	}
	later := parsed
	later.Time++
	flipped := parsed
	flipped.Signature[10] ^= 1
	if got := reason(v.Verify(later.String(), claims)); got != contract.ReasonSignatureInvalid {
		t.Errorf("time changed: reason %q", got)
	}
	if got := reason(v.Verify(flipped.String(), claims)); got != contract.ReasonSignatureInvalid {
		t.Errorf("signature changed: reason %q", got)
	}
	if got := reason(v.Verify("", claims)); got != contract.ReasonSignatureMissing {
		t.Errorf("no header: reason %q", got)
	}
	if got := reason(v.Verify(h+"x", claims)); got != contract.ReasonSignatureMalformed {
		t.Errorf("trailing byte: reason %q", got)
	}

	// Another key's signature, with or without its key ID.
	other := assertion.NewSigner(newKey(t), 0, clk.Now).Sign(claims)
	if got := reason(v.Verify(other, claims)); got != contract.ReasonSignatureUnknownKey {
		t.Errorf("other key: reason %q", got)
	}
	o, _ := assertion.ParseHeader(other)
	o.KeyID = parsed.KeyID
	if got := reason(v.Verify(o.String(), claims)); got != contract.ReasonSignatureInvalid {
		t.Errorf("other key under our key ID: reason %q", got)
	}
}

func TestValidity(t *testing.T) {
	start := time.Unix(1764355200, 0)
	clk := clocktesting.NewFakeClock(start)
	k := newKey(t)
	h := assertion.NewSigner(k, 0, clk.Now).Sign(claims)
	vclk := clocktesting.NewFakeClock(start)
	v := assertion.NewVerifier([]ed25519.PublicKey{pub(k)}, vclk.Now)
	for _, tc := range []struct {
		at   time.Duration
		want contract.DenyReason
	}{
		{0, ""},
		{assertion.Validity, ""},
		{assertion.Validity + time.Second, contract.ReasonSignatureExpired},
		{time.Hour, contract.ReasonSignatureExpired},
		{-assertion.MaxSkew, ""},
		{-assertion.MaxSkew - time.Second, contract.ReasonSignatureExpired},
	} {
		vclk.SetTime(start.Add(tc.at))
		if got := reason(v.Verify(h, claims)); got != tc.want {
			t.Errorf("verified %v after signing: reason %q, want %q", tc.at, got, tc.want)
		}
	}
}

// TestRotation: a new key is published to the verifiers before the signer
// uses it (the signer's grace), and the old key stays accepted after the
// verifiers' key set moved on.
func TestRotation(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1764355200, 0))
	oldKey, newK := newKey(t), newKey(t)
	s := assertion.NewSigner(oldKey, time.Minute, clk.Now)
	v := assertion.NewVerifier([]ed25519.PublicKey{pub(oldKey)}, clk.Now)

	s.SetKey(newK) // ext-authz's key file changed first
	if s.KeyID() != assertion.IDOf(pub(oldKey)) {
		t.Fatal("the new key signs before its grace passed")
	}
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("during the grace: %v", err)
	}
	v.SetKeys([]ed25519.PublicKey{pub(newK)}) // the verifier's key set file changed
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("old key after the verifier moved on: %v", err)
	}
	clk.Step(time.Minute)
	if s.KeyID() != assertion.IDOf(pub(newK)) {
		t.Fatal("the new key does not sign after the grace")
	}
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("new key: %v", err)
	}
	s.SetKey(newK) // the same key again: nothing changes
	if s.KeyID() != assertion.IDOf(pub(newK)) {
		t.Fatal("setting the key in use again changed the key")
	}
	// Two rotations later the first key is gone.
	third := newKey(t)
	v.SetKeys([]ed25519.PublicKey{pub(third)})
	h := assertion.NewSigner(oldKey, 0, clk.Now).Sign(claims)
	if got := reason(v.Verify(h, claims)); got != contract.ReasonSignatureUnknownKey {
		t.Errorf("key of two sets ago: reason %q", got)
	}
	if got := v.KeyIDs(); len(got) != 2 || got[0] != assertion.IDOf(pub(third)).String() || got[1] != assertion.IDOf(pub(newK)).String() {
		t.Errorf("key IDs %v", got)
	}
}

func TestVerifyRequest(t *testing.T) {
	k := newKey(t)
	s := assertion.NewSigner(k, 0, nil)
	v := assertion.NewVerifier([]ed25519.PublicKey{pub(k)}, nil)
	req := func(path string) *http.Request {
		r := httptest.NewRequest("POST", path, nil)
		r.Header.Set(contract.HeaderRuntimeID, claims.RuntimeID)
		r.Header.Set(contract.HeaderSKRDomain, claims.SKRDomain)
		r.Header.Set(contract.HeaderIdentitySignature, s.Sign(claims))
		return r
	}
	r := req(claims.Path)
	if id, err := v.VerifyRequest(r); err != nil || id != claims.RuntimeID {
		t.Fatalf("signed request: %q, %v", id, err)
	}
	r = req("/tenant/operator")
	if _, err := v.VerifyRequest(r); reason(err) != contract.ReasonSignatureInvalid {
		t.Errorf("another path: %v", err)
	}
	r = req(claims.Path)
	r.Header.Add(contract.HeaderRuntimeID, "runtime-2")
	if _, err := v.VerifyRequest(r); reason(err) != contract.ReasonSignatureInvalid {
		t.Errorf("a second runtime ID: %v", err)
	}
	r = req(claims.Path)
	r.Header.Set(contract.HeaderRuntimeID, "runtime-2")
	if _, err := v.VerifyRequest(r); reason(err) != contract.ReasonSignatureInvalid {
		t.Errorf("runtime ID set by a route: %v", err)
	}
	r = req(claims.Path)
	r.Header.Del(contract.HeaderIdentitySignature)
	if _, err := v.VerifyRequest(r); reason(err) != contract.ReasonSignatureMissing {
		t.Errorf("signature removed: %v", err)
	}
}

func selfSigned(t *testing.T, key any, pubKey any) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "runtime-watcher-identity-signing"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, pubKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestKeyFiles(t *testing.T) {
	k := newKey(t)
	der, err := x509.MarshalPKCS8PrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
	got, err := assertion.ParseSigningKey(keyPEM)
	if err != nil || !got.Equal(k) {
		t.Fatalf("ParseSigningKey: %v", err)
	}
	ec, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	ecDER, _ := x509.MarshalPKCS8PrivateKey(ec)
	if _, err := assertion.ParseSigningKey(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: ecDER})); err == nil {
		t.Error("an ECDSA signing key was taken")
	}

	// A key set: cert-manager's tls.crt (a certificate) and a PUBLIC KEY.
	other := newKey(t)
	pkix, _ := x509.MarshalPKIXPublicKey(pub(other))
	set := append(selfSigned(t, k, pub(k)), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix})...)
	pubs, err := assertion.ParseKeySet(set)
	if err != nil || len(pubs) != 2 || !pubs[0].Equal(pub(k)) || !pubs[1].Equal(pub(other)) {
		t.Fatalf("ParseKeySet: %v, %d keys", err, len(pubs))
	}
	for name, data := range map[string][]byte{
		"empty":         nil,
		"ECDSA":         selfSigned(t, ec, &ec.PublicKey),
		"private key":   keyPEM,
		"too many keys": []byte(strings.Repeat(string(set), assertion.MaxKeys/2+1)),
	} {
		if _, err := assertion.ParseKeySet(data); err == nil {
			t.Errorf("%s: key set taken", name)
		}
	}

	// From files, reloaded.
	dir := t.TempDir()
	keyFile, setFile := filepath.Join(dir, "tls.key"), filepath.Join(dir, "tls.crt")
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setFile, selfSigned(t, k, pub(k)), 0o600); err != nil {
		t.Fatal(err)
	}
	s, sw, err := assertion.SignerFromFile(keyFile, time.Nanosecond, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	v, vw, err := assertion.VerifierFromFile(setFile, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("from files: %v", err)
	}
	der2, _ := x509.MarshalPKCS8PrivateKey(other)
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der2}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(setFile, selfSigned(t, other, pub(other)), 0o600); err != nil {
		t.Fatal(err)
	}
	if !sw.Reload() || !vw.Reload() {
		t.Fatal("changed files not reloaded")
	}
	if s.KeyID() != assertion.IDOf(pub(other)) {
		t.Error("the signer does not use the new key after its grace")
	}
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	if err := os.WriteFile(setFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if vw.Reload() {
		t.Error("an unusable key set file was loaded")
	}
	if err := v.Verify(s.Sign(claims), claims); err != nil {
		t.Fatalf("an unusable file replaced the keys in use: %v", err)
	}
	if _, _, err := assertion.VerifierFromFile(setFile, logr.Discard()); err == nil {
		t.Error("VerifierFromFile took an unusable file")
	}
	if _, _, err := assertion.SignerFromFile(setFile, 0, logr.Discard()); err == nil {
		t.Error("SignerFromFile took an unusable file")
	}
}
