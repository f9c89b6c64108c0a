package trust_test

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// FuzzParseBundle: the trust store is a ConfigMap that whoever may write
// ConfigMaps in the Kyma namespace can fill (docs/security.md, "Threat
// model: the KCP"). Whatever it holds, ParseBundle does not panic, and the
// certificates it returns encode (EncodeBundle) to a bundle that parses
// back to the same certificates, cleanly.
func FuzzParseBundle(f *testing.F) {
	ca, err := pki.NewCA("fuzz CA")
	if err != nil {
		f.Fatal(err)
	}
	other, err := pki.NewCA("other CA")
	if err != nil {
		f.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(append(append([]byte{}, ca.PEM...), other.PEM...))
	f.Add(append(append([]byte{}, ca.PEM...), leaf.KeyPEM...))
	f.Add(append([]byte("garbage\n"), ca.PEM...))
	f.Add([]byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		certs, _ := trust.ParseBundle(data)
		again, bad := trust.ParseBundle(trust.EncodeBundle(certs))
		if bad != nil {
			t.Fatalf("the encoding of what it parsed does not parse cleanly: %v", bad)
		}
		if len(again) != len(certs) {
			t.Fatalf("round trip: %d certificates, want %d", len(again), len(certs))
		}
		for i := range certs {
			if !certs[i].Equal(again[i]) {
				t.Fatalf("round trip: certificate %d differs", i)
			}
		}
	})
}
