package assertion_test

import (
	"crypto/ed25519"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// FuzzParseHeader: the parser never panics, takes only what it writes
// (a parsed header formats back to the same bytes), and a header it takes
// verifies only when it was signed.
func FuzzParseHeader(f *testing.F) {
	_, priv, _ := ed25519.GenerateKey(nil)
	now := time.Unix(1764355200, 0)
	s := assertion.NewSigner(priv, 0, func() time.Time { return now })
	good := s.Sign(claims)
	f.Add(good)
	f.Add("")
	f.Add("v1;t=0;k=0000000000000000;s=")
	f.Add(good[:len(good)-1] + "B")
	f.Add("v1;t=01764355200" + good[len("v1;t=1764355200"):])
	v := assertion.NewVerifier([]ed25519.PublicKey{priv.Public().(ed25519.PublicKey)}, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, in string) {
		h, err := assertion.ParseHeader(in)
		if err != nil {
			return
		}
		if h.String() != in {
			t.Fatalf("parsed %q, formats as %q", in, h.String())
		}
		if v.Verify(in, claims) == nil && in != good {
			t.Fatalf("%q verified, signed was %q", in, good)
		}
	})
}
