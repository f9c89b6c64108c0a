package delivery

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

func TestIsTLSFailure(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer srv.Close()

	// A client that does not trust the server: a verification error.
	untrusting := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}}}
	req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL, nil)
	_, err := untrusting.Do(req) //nolint:bodyclose // fails before a response
	if err == nil || !IsTLSFailure(err) {
		t.Fatalf("untrusted server certificate: IsTLSFailure(%v) = false", err)
	}
	if !IsTLSFailure(fmt.Errorf("post: %w", tls.AlertError(42))) {
		t.Fatal("a TLS alert from the server (client certificate refused) is a TLS failure")
	}
	for _, err := range []error{nil, errors.New("connection refused"), context.DeadlineExceeded} {
		if IsTLSFailure(err) {
			t.Fatalf("IsTLSFailure(%v) = true", err)
		}
	}
	// The trusting client succeeds.
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
}
