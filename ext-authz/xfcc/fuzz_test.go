package xfcc_test

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/xfcc"
)

// FuzzParse checks the parser's invariants on arbitrary input. The seed
// corpus is in testdata/fuzz/FuzzParse (the 49 fixture vectors, grammar edge
// cases and Envoy-encoded certificates).
func FuzzParse(f *testing.F) {
	f.Add(`By=spiffe://a;Hash=1;Cert="-----BEGIN%20CERTIFICATE-----%0AAAAA%0A-----END%20CERTIFICATE-----%0A";Subject="CN=a\"b";URI=x;DNS=y`)
	f.Add("Hash=a, Hash=b;\tURI=c")
	f.Fuzz(func(t *testing.T, header string) {
		elems, err := xfcc.Parse(header)
		if len(header) > xfcc.MaxHeaderBytes && !errors.Is(err, xfcc.ErrTooLarge) {
			t.Fatalf("header of %d bytes accepted (err %v)", len(header), err)
		}
		if err != nil {
			if elems != nil {
				t.Fatalf("error %v with a result", err)
			}
			return
		}
		if header == "" && len(elems) != 0 {
			t.Fatalf("empty header gave %d elements", len(elems))
		}
		if len(elems) > xfcc.MaxElements {
			t.Fatalf("%d elements", len(elems))
		}
		size, pairs := 0, 0
		for _, e := range elems {
			if len(e) == 0 || len(e) > xfcc.MaxPairsPerElement {
				t.Fatalf("element with %d pairs", len(e))
			}
			pairs += len(e)
			for _, p := range e {
				if p.Key == "" || strings.ContainsAny(p.Key, "=;,\" \t") {
					t.Fatalf("bad key %q", p.Key)
				}
				if !p.Quoted && strings.ContainsAny(p.Value, ";,\"") {
					t.Fatalf("unquoted value %q holds a separator", p.Value)
				}
				if strings.ContainsFunc(p.Value, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
					t.Fatalf("value %q holds a control character", p.Value)
				}
				if len(p.Unescaped()) > len(p.Value) {
					t.Fatalf("unescaping grew %q", p.Value)
				}
				size += len(p.Key) + len(p.Value)
			}
			// Decoding must never panic, and must give a certificate or an error.
			if c, err := e.Certificate(); (c == nil) == (err == nil) {
				t.Fatalf("Certificate() = %v, %v", c, err)
			}
		}
		if pairs > xfcc.MaxPairs || (len(elems) > 0 && size >= len(header)) {
			t.Fatalf("%d pairs, %d bytes of keys and values from %d bytes", pairs, size, len(header))
		}
		// Re-parse stability: what Format writes parses to the same elements,
		// and is the input itself when it had no optional whitespace.
		out := xfcc.Format(elems)
		if len(out) > len(header) {
			t.Fatalf("Format grew %d bytes to %d", len(header), len(out))
		}
		again, err := xfcc.Parse(out)
		if err != nil || !reflect.DeepEqual(again, elems) {
			t.Fatalf("re-parse of %q: %v, %+v != %+v", out, err, again, elems)
		}
		if !strings.ContainsAny(header, " \t") && out != header {
			t.Fatalf("Format(Parse(%q)) = %q", header, out)
		}
	})
}
