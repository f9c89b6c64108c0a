package health

import (
	"crypto/ed25519"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// TestHandlerIdentitySignature: with VerifyIdentity a report is taken only
// with ext-authz's signature over its runtime and path; a route that set
// x-watcher-runtime-id or rewrote another path to the health path cannot
// report for a runtime.
func TestHandlerIdentitySignature(t *testing.T) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer := assertion.NewSigner(priv, 0, nil)
	tr := NewTracker(nil, 10)
	tr.VerifyIdentity(assertion.NewVerifier([]ed25519.PublicKey{pub}, nil))
	h := tr.Handler(func(string) bool { return true })
	do := func(id, signedID, signedPath string, sign bool) *httptest.ResponseRecorder {
		r := httptest.NewRequest(http.MethodPost, contract.HealthPath, strings.NewReader(`{}`))
		r.Header.Set(contract.HeaderRuntimeID, id)
		r.Header.Set(contract.HeaderSKRDomain, "skr.example.com")
		if sign {
			r.Header.Set(contract.HeaderIdentitySignature, signer.Sign(assertion.Claims{
				RuntimeID: signedID, SKRDomain: "skr.example.com", Method: http.MethodPost, Path: signedPath}))
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}
	if w := do("runtime-1", "runtime-1", contract.HealthPath, true); w.Code != http.StatusNoContent {
		t.Fatalf("signed report: %d %s", w.Code, w.Body)
	}
	for _, tc := range []struct {
		name                   string
		id, signedID, signedAt string
		sign                   bool
		status                 int
		reason                 contract.DenyReason
	}{
		{"no signature", "runtime-2", "", "", false, http.StatusUnauthorized, contract.ReasonSignatureMissing},
		{"runtime ID set by a route", "runtime-2", "runtime-1", contract.HealthPath, true, http.StatusForbidden, contract.ReasonSignatureInvalid},
		{"a tenant path rewritten to the health path", "runtime-2", "runtime-2", "/tenant/health", true, http.StatusForbidden, contract.ReasonSignatureInvalid},
	} {
		before := testutil.ToFloat64(reports.WithLabelValues(string(tc.reason)))
		w := do(tc.id, tc.signedID, tc.signedAt, tc.sign)
		if w.Code != tc.status || w.Header().Get(contract.HeaderDenyReason) != string(tc.reason) {
			t.Errorf("%s: %d %q, want %d %q", tc.name, w.Code, w.Header().Get(contract.HeaderDenyReason), tc.status, tc.reason)
		}
		if got := testutil.ToFloat64(reports.WithLabelValues(string(tc.reason))); got != before+1 {
			t.Errorf("%s: reports{result=%q} %v, want %v", tc.name, tc.reason, got, before+1)
		}
	}
	if _, _, ok := tr.Last("runtime-2"); ok {
		t.Error("a refused report was recorded for runtime-2")
	}
}
