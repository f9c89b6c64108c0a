package xfcc_test

import (
	"encoding/json"
	"net/url"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
)

// vectorFile mirrors testdata/parse-vectors.json (see testdata/README.md).
type vectorFile struct {
	Vectors []struct {
		ID     string                     `json:"id"`
		Header string                     `json:"header"`
		Expect map[string]json.RawMessage `json:"expect"`
	} `json:"vectors"`
}

// certCN gives the CN of the certificate files the vectors refer to (they
// are named in the vectors, not shipped with them).
var certCN = map[string]string{
	"certs/a-runtime-a.crt": "runtime-a",
	"certs/c-runtime-b.crt": "runtime-b",
}

func TestParseVectors(t *testing.T) {
	raw, err := os.ReadFile("testdata/parse-vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var vf vectorFile
	if err := json.Unmarshal(raw, &vf); err != nil {
		t.Fatal(err)
	}
	if len(vf.Vectors) != 49 {
		t.Fatalf("want the 49 vectors of the fixture, got %d", len(vf.Vectors))
	}
	for _, v := range vf.Vectors {
		t.Run(v.ID, func(t *testing.T) {
			elems, err := xfcc.Parse(v.Header)
			var parse string
			mustUnmarshal(t, v.Expect["parse"], &parse)
			if parse == "error" {
				if err == nil {
					t.Fatalf("want an error, got %d elements: %+v", len(elems), elems)
				}
				return
			}
			if err != nil {
				t.Fatalf("want ok, got %v", err)
			}
			for key, val := range v.Expect {
				checkExpectation(t, key, val, elems)
			}
		})
	}
}

func checkExpectation(t *testing.T, key string, val json.RawMessage, elems []xfcc.Element) {
	t.Helper()
	first := func() xfcc.Element {
		if len(elems) == 0 {
			t.Fatalf("%s: no element", key)
		}
		return elems[0]
	}
	switch key {
	case "parse":
	case "elements":
		var want [][][2]string
		mustUnmarshal(t, val, &want)
		got := make([][][2]string, len(elems))
		for i, e := range elems {
			got[i] = [][2]string{}
			for _, p := range e {
				got[i] = append(got[i], [2]string{p.Key, p.Value})
			}
		}
		if len(want) == 0 && len(got) == 0 {
			return
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("elements:\n got %q\nwant %q", got, want)
		}
	case "unescaped_values":
		var want map[string]string
		mustUnmarshal(t, val, &want)
		for k, w := range want {
			if got, _ := first().Value(k); got != w {
				t.Errorf("unescaped %s: got %q, want %q", k, got, w)
			}
		}
	case "dns":
		assertValues(t, first(), xfcc.KeyDNS, val)
	case "by_values":
		assertValues(t, first(), xfcc.KeyBy, val)
	case "keys_case_insensitive":
		// Every pair is found under its key in other letter cases too.
		for _, e := range elems {
			for _, p := range e {
				for _, k := range []string{strings.ToUpper(p.Key), strings.ToLower(p.Key), swapCase(p.Key)} {
					if !contains(e.Values(k), p.Unescaped()) {
						t.Errorf("key %q: value %q not found as %q", p.Key, p.Value, k)
					}
				}
			}
		}
	case "canonical":
		var want map[string]any
		mustUnmarshal(t, val, &want)
		for k, w := range want {
			switch w := w.(type) {
			case string:
				if got, ok := first().Value(k); !ok || got != w {
					t.Errorf("canonical %s: got %q (%v), want %q", k, got, ok, w)
				}
			case []any:
				var ws []string
				for _, x := range w {
					ws = append(ws, x.(string))
				}
				if got := first().Values(k); !reflect.DeepEqual(got, ws) {
					t.Errorf("canonical %s: got %q, want %q", k, got, ws)
				}
			}
		}
	case "has_cert", "has_cert_key":
		var want bool
		mustUnmarshal(t, val, &want)
		if _, got := first().Value(xfcc.KeyCert); got != want {
			t.Errorf("%s: got %v, want %v", key, got, want)
		}
		if !want {
			if _, err := first().Certificate(); err != xfcc.ErrNoCert {
				t.Errorf("Certificate(): got %v, want ErrNoCert", err)
			}
		}
	case "cert_decodes":
		var want bool
		mustUnmarshal(t, val, &want)
		v, ok := first().Value(xfcc.KeyCert)
		if !ok {
			v, _ = first().Value(xfcc.KeyChain)
		}
		if _, err := xfcc.DecodeCert(v); (err == nil) != want {
			t.Errorf("cert decodes: got err %v, want decodes=%v", err, want)
		}
	case "cert_file", "cert_common_name":
		var s string
		mustUnmarshal(t, val, &s)
		want := s
		if key == "cert_file" {
			want = certCN[s]
		}
		assertCertCN(t, first(), want)
	case "cert_file_in_chain":
		var f string
		mustUnmarshal(t, val, &f)
		chain, _ := first().Value(xfcc.KeyChain)
		c, err := xfcc.DecodeCert(chain)
		if err != nil || c.Subject.CommonName != certCN[f] {
			t.Errorf("chain: got %v, want CN %q", err, certCN[f])
		}
	case "element_cert_files":
		var files []string
		mustUnmarshal(t, val, &files)
		if len(files) != len(elems) {
			t.Fatalf("element_cert_files: %d files for %d elements", len(files), len(elems))
		}
		for i, f := range files {
			assertCertCN(t, elems[i], certCN[f])
		}
	case "cert_decodes_with_query_unescape", "cert_decodes_with_path_unescape":
		var want bool
		mustUnmarshal(t, val, &want)
		v, _ := first().Value(xfcc.KeyCert)
		var err error
		if key == "cert_decodes_with_query_unescape" {
			_, err = xfcc.DecodeCert(v)
		} else {
			var d string
			if d, err = url.PathUnescape(v); err == nil {
				_, err = xfcc.ParsePEMCert([]byte(d))
			}
		}
		if (err == nil) != want {
			t.Errorf("%s: got err %v, want decodes=%v", key, err, want)
		}
	case "upstream_listener_result":
		var s string
		mustUnmarshal(t, val, &s)
		c, err := first().Certificate()
		if cn, ok := strings.CutPrefix(s, "ok, RuntimeId="); ok {
			if err != nil || c.Subject.CommonName != cn {
				t.Errorf("want CN %q, got %v", cn, err)
			}
		} else if err == nil {
			t.Errorf("upstream listener refuses (%s), but the certificate decoded", s)
		}
	case "subject_common_name", "subject_common_name_element_0":
		// The Subject pair is never used for identity (docs/architecture.md §4.1);
		// this checks the raw value carries the CN the source expects.
		var want string
		mustUnmarshal(t, val, &want)
		subj, ok := first().Value(xfcc.KeySubject)
		if got := subjectAttrs(subj)["CN"]; !ok || got != want {
			t.Errorf("subject CN: got %q from %q, want %q", got, subj, want)
		}
	case "subject_dn_element_0":
		var want map[string]string
		mustUnmarshal(t, val, &want)
		subj, _ := first().Value(xfcc.KeySubject)
		if got := subjectAttrs(subj); !reflect.DeepEqual(got, want) {
			t.Errorf("subject DN: got %q, want %q", got, want)
		}
	default:
		t.Errorf("expectation %q is not checked by this test", key)
	}
}

func assertValues(t *testing.T, e xfcc.Element, key string, raw json.RawMessage) {
	t.Helper()
	var want []string
	mustUnmarshal(t, raw, &want)
	if got := e.Values(key); !reflect.DeepEqual(got, want) {
		t.Errorf("%s values: got %q, want %q", key, got, want)
	}
}

func assertCertCN(t *testing.T, e xfcc.Element, want string) {
	t.Helper()
	if want == "" {
		t.Fatal("no CN known for the expected certificate")
	}
	c, err := e.Certificate()
	if err != nil {
		t.Fatalf("Certificate(): %v", err)
	}
	if c.Subject.CommonName != want {
		t.Errorf("certificate CN: got %q, want %q", c.Subject.CommonName, want)
	}
}

// subjectAttrs splits a Subject in RFC 2253 form ("CN=a,O=b\, c") or in
// OpenSSL's legacy oneline form ("/C=US/CN=a") into its attributes, removing
// backslash escapes. Test-only: identity never comes from Subject.
func subjectAttrs(s string) map[string]string {
	sep := byte(',')
	if strings.HasPrefix(s, "/") {
		sep, s = '/', s[1:]
	}
	attrs := map[string]string{}
	var parts []string
	var cur strings.Builder
	for i := 0; i < len(s); i++ {
		switch {
		case s[i] == '\\' && i+1 < len(s):
			cur.WriteByte(s[i+1])
			i++
		case s[i] == sep:
			parts = append(parts, cur.String())
			cur.Reset()
		default:
			cur.WriteByte(s[i])
		}
	}
	parts = append(parts, cur.String())
	for _, p := range parts {
		if k, v, ok := strings.Cut(p, "="); ok {
			attrs[strings.TrimSpace(k)] = v
		}
	}
	return attrs
}

func mustUnmarshal(t *testing.T, raw json.RawMessage, v any) {
	t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("fixture: %v", err)
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func swapCase(s string) string {
	b := []byte(s)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 32
		case c >= 'A' && c <= 'Z':
			b[i] = c + 32
		}
	}
	return string(b)
}
