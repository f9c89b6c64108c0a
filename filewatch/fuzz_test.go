package filewatch_test

import (
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// FuzzParseCABundle: ext-authz's readiness rests on the --ca-file bundle ParseCABundle
// accepts (issue 33: readiness's parser). Whatever the file holds, ParseCABundle
// does not panic, and a bundle it accepts holds only CA certificates, at
// least one still usable at now, with NotAfter the earliest of them.
func FuzzParseCABundle(f *testing.F) {
	now := time.Now()
	ca, err := pki.NewCA("fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	expired, err := pki.NewCAValid("expired CA", now.Add(-48*time.Hour), now.Add(-time.Hour))
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(ca.PEM)
	f.Add(append(append([]byte("subject=CN = fuzz CA\n"), ca.PEM...), expired.PEM...))
	f.Add(expired.PEM)
	f.Add(leaf.CertPEM)
	f.Add(leaf.KeyPEM)
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := filewatch.ParseCABundle(data, now)
		if err != nil {
			if b != nil {
				t.Fatalf("an error (%v) with a bundle", err)
			}
			return
		}
		if len(b.CAs) == 0 || b.Expired >= len(b.CAs) || !b.UsableAt(now) {
			t.Fatalf("accepted a bundle with %d CAs, %d expired, usable %v", len(b.CAs), b.Expired, b.UsableAt(now))
		}
		for _, c := range b.CAs {
			if !c.BasicConstraintsValid || !c.IsCA {
				t.Fatalf("accepted %s, which is no CA", c.Subject)
			}
			if c.NotAfter.Before(b.NotAfter) {
				t.Fatalf("NotAfter %s is not the earliest (%s)", b.NotAfter, c.NotAfter)
			}
		}
	})
}
