package filewatch_test

import (
	"crypto/x509"
	"encoding/pem"
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func TestParseCABundle(t *testing.T) {
	now := time.Now()
	a, b := pki.MustCA(t, "ca-a"), pki.MustCA(t, "ca-b")
	expired, err := pki.NewCAValid("ca-expired", now.Add(-48*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	future, err := pki.NewCAValid("ca-future", now.Add(time.Hour), now.Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := a.Issue(pki.LeafOptions{CommonName: "runtime-1"})
	if err != nil {
		t.Fatal(err)
	}
	key := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: []byte{1, 2, 3}})
	broken := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("not DER")})

	for _, tc := range []struct {
		name     string
		data     []byte
		cas      int
		expired  int
		notAfter time.Time
		wantErr  string
	}{
		{name: "one CA", data: a.PEM, cas: 1, notAfter: a.Cert.NotAfter},
		{name: "bundle", data: pki.Bundle(a, b), cas: 2, notAfter: a.Cert.NotAfter},
		{name: "text between blocks", data: append(append([]byte("subject=CN=ca-a\n"), a.PEM...), append([]byte("\n# next\n"), b.PEM...)...), cas: 2},
		{name: "an expired CA among valid ones", data: pki.Bundle(expired, a), cas: 2, expired: 1, notAfter: expired.Cert.NotAfter},
		{name: "a CA not valid yet", data: future.PEM, cas: 1, notAfter: future.Cert.NotAfter},
		{name: "empty", data: nil, wantErr: "no PEM certificate"},
		{name: "garbage", data: []byte("this is not PEM\x00\x01"), wantErr: "no PEM certificate"},
		{name: "only expired CAs", data: expired.PEM, wantErr: "every CA in it expired"},
		{name: "a leaf", data: pki.Bundle(a, &pki.CA{PEM: leaf.CertPEM}), wantErr: "certificate 2 (CN=runtime-1) is not a CA"},
		{name: "a private key", data: append(pki.Bundle(a), key...), wantErr: `PEM block 2 is a "EC PRIVATE KEY"`},
		{name: "a certificate that does not parse", data: append(pki.Bundle(a), broken...), wantErr: "certificate 2:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := filewatch.ParseCABundle(tc.data, now)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("got %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got.CAs) != tc.cas || got.Expired != tc.expired {
				t.Errorf("%d CAs (%d expired), want %d (%d)", len(got.CAs), got.Expired, tc.cas, tc.expired)
			}
			if !tc.notAfter.IsZero() && !got.NotAfter.Equal(tc.notAfter) {
				t.Errorf("earliest not-after %s, want %s", got.NotAfter, tc.notAfter)
			}
			for _, c := range got.CAs {
				if _, err := c.Verify(x509.VerifyOptions{Roots: got.Pool, CurrentTime: c.NotBefore.Add(time.Second)}); err != nil {
					t.Errorf("CA %s not in the pool: %v", c.Subject, err)
				}
			}
		})
	}
}
