// Package xfcc parses Envoy's x-forwarded-client-cert (XFCC) header and
// decodes the client certificate it carries.
//
// The grammar is Envoy's (docs: http_conn_man/headers.rst): the header is a
// comma-separated list of elements, one per proxy hop; an element is a
// semicolon-separated list of key=value pairs; the key ends at the first '='
// (keys are case-insensitive: By, Hash, Cert, Chain, Subject, URI, DNS; any
// other key is kept and ignored by callers); a value is either unquoted (no
// ',', ';' or '"') or double-quoted, in which case it may contain ',', ';'
// and '=' and a backslash escapes the next character (`\"` is a quote).
// Envoy quotes only Cert, Chain and Subject, so an unquoted URI value may
// contain text that looks like another pair ("URI=x;DNS=evil"): identity
// must come from the certificate decoded from Cert (see DecodeCert), never
// from the DNS or Subject pairs.
//
// Parsing is strict and bounded: the header is at most MaxHeaderBytes, with
// at most MaxElements elements, MaxPairsPerElement pairs per element and
// MaxPairs pairs in all; control characters, empty elements or pairs,
// missing '=' and unterminated or misplaced quotes are errors.
package xfcc

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/pem"
	"errors"
	"fmt"
	"strings"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Bounds of a header Parse accepts.
const (
	// MaxHeaderBytes is the largest header accepted (32 KiB).
	MaxHeaderBytes = contract.MaxXFCCBytes
	// MaxElements bounds the elements (proxy hops) of a header.
	MaxElements = 16
	// MaxPairsPerElement bounds the pairs of one element. Envoy writes one
	// DNS or URI pair per SAN, so this leaves room for contract.MaxSANs SANs
	// plus By, Hash, Cert, Chain and Subject.
	MaxPairsPerElement = 2*contract.MaxSANs + 56
	// MaxPairs bounds the pairs of the whole header.
	MaxPairs = 2 * MaxPairsPerElement
)

// Well-known keys (compare case-insensitively, e.g. with Element.Values).
const (
	KeyBy      = "By"
	KeyHash    = "Hash"
	KeyCert    = "Cert"
	KeyChain   = "Chain"
	KeySubject = "Subject"
	KeyURI     = "URI"
	KeyDNS     = "DNS"
)

// Errors returned by Parse (wrapped in *SyntaxError for grammar errors).
var (
	ErrTooLarge        = fmt.Errorf("xfcc: header longer than %d bytes", MaxHeaderBytes)
	ErrTooManyElements = fmt.Errorf("xfcc: more than %d elements", MaxElements)
	ErrTooManyPairs    = fmt.Errorf("xfcc: more than %d pairs in an element or %d in the header", MaxPairsPerElement, MaxPairs)
)

// Errors returned by Element.Certificate and DecodeCert.
var (
	// ErrNoCert: the element has no Cert pair, or its value is empty.
	ErrNoCert = errors.New("xfcc: no Cert in element")
	// ErrMultipleCerts: the element has more than one Cert pair.
	ErrMultipleCerts = errors.New("xfcc: more than one Cert in element")
	// ErrCertEncoding: the value is not valid URL (query) encoding.
	ErrCertEncoding = errors.New("xfcc: Cert is not URL-encoded")
	// ErrCertPEM: the decoded value is not exactly one PEM CERTIFICATE block.
	ErrCertPEM = errors.New("xfcc: Cert is not one PEM certificate")
	// ErrCertDER: the PEM block is not a parsable X.509 certificate.
	ErrCertDER = errors.New("xfcc: Cert is not a valid X.509 certificate")
)

// SyntaxError is a grammar error at a byte offset of the header.
type SyntaxError struct {
	Offset int
	Msg    string
}

func (e *SyntaxError) Error() string { return fmt.Sprintf("xfcc: %s at offset %d", e.Msg, e.Offset) }

// Pair is one key=value of an element. Key is as written; Value is the raw
// text (for a quoted value: between the quotes, backslash escapes kept).
type Pair struct {
	Key    string
	Value  string
	Quoted bool
}

// Unescaped returns the value with the XFCC-level escape `\"` -> `"`
// removed; other backslash sequences (e.g. RFC 2253's `\\` or `\,` in a
// Subject) are kept as they are.
func (p Pair) Unescaped() string {
	if !p.Quoted || !strings.Contains(p.Value, `\"`) {
		return p.Value
	}
	var b strings.Builder
	b.Grow(len(p.Value))
	for i := 0; i < len(p.Value); i++ {
		c := p.Value[i]
		if c == '\\' && i+1 < len(p.Value) {
			if p.Value[i+1] != '"' {
				b.WriteByte(c)
			}
			b.WriteByte(p.Value[i+1])
			i++
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}

// Element is the list of pairs of one proxy hop, in header order.
type Element []Pair

// Values returns the unescaped values of every pair whose key equals key
// case-insensitively, in header order.
func (e Element) Values(key string) []string {
	var vs []string
	for _, p := range e {
		if strings.EqualFold(p.Key, key) {
			vs = append(vs, p.Unescaped())
		}
	}
	return vs
}

// Value returns the unescaped value of the first pair with key
// (case-insensitive) and whether there is one.
func (e Element) Value(key string) (string, bool) {
	for _, p := range e {
		if strings.EqualFold(p.Key, key) {
			return p.Unescaped(), true
		}
	}
	return "", false
}

// Certificate decodes the element's Cert value (see DecodeCert). It returns
// ErrNoCert when there is no Cert or it is empty and ErrMultipleCerts when
// there is more than one.
func (e Element) Certificate() (*x509.Certificate, error) {
	v, err := e.CertValue()
	if err != nil {
		return nil, err
	}
	return DecodeCert(v)
}

// CertValue returns the element's one Cert value (unescaped, not decoded),
// ErrNoCert when there is none or it is empty and ErrMultipleCerts when
// there is more than one. It does not allocate (the per-request path).
func (e Element) CertValue() (string, error) {
	var v string
	n := 0
	for _, p := range e {
		if strings.EqualFold(p.Key, KeyCert) {
			if n++; n > 1 {
				return "", ErrMultipleCerts
			}
			v = p.Unescaped()
		}
	}
	if v == "" {
		return "", ErrNoCert
	}
	return v, nil
}

// DecodeCert decodes a Cert value: URL-decoded with query-unescape semantics
// ('+' is a space, %XX a byte — Envoy writes '+' as %2B; the same result as
// net/url.QueryUnescape), then exactly one PEM CERTIFICATE block
// (surrounding whitespace allowed), then X.509 DER.
func DecodeCert(value string) (*x509.Certificate, error) {
	if value == "" {
		return nil, ErrNoCert
	}
	decoded, err := queryUnescape(value)
	if err != nil {
		return nil, err
	}
	return ParsePEMCert(decoded)
}

// queryUnescape is net/url.QueryUnescape into a byte slice, in one pass and
// one allocation (certificate decoding is on every request's path).
func queryUnescape(s string) ([]byte, error) {
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '%':
			if i+2 >= len(s) || !isHex(s[i+1]) || !isHex(s[i+2]) {
				bad := s[i:min(i+3, len(s))]
				return nil, fmt.Errorf("%w: invalid URL escape %q", ErrCertEncoding, bad)
			}
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		case '+':
			b = append(b, ' ')
		default:
			b = append(b, c)
		}
	}
	return b, nil
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// EncodeCert URL-encodes a PEM certificate the way Envoy writes it into
// the Cert (and Chain) value: newline, space, '+', '/' and '=' as %0A, %20,
// %2B, %2F and %3D (and, never present in PEM, '%', CR, '"', ',' and ';'),
// so the value needs no quotes. DecodeCert reverses it.
func EncodeCert(pemBytes []byte) string {
	return certEncoder.Replace(string(pemBytes))
}

var certEncoder = strings.NewReplacer("%", "%25", "\n", "%0A", " ", "%20", "+", "%2B", "/", "%2F", "=", "%3D", "\r", "%0D", "\"", "%22", ",", "%2C", ";", "%3B")

// ParsePEMCert parses data that must be exactly one PEM CERTIFICATE block
// without PEM headers, possibly surrounded by whitespace.
func ParsePEMCert(data []byte) (*x509.Certificate, error) {
	data = bytes.TrimSpace(data)
	der, ok := pemFast(data)
	if !ok {
		if !bytes.HasPrefix(data, pemBegin) {
			return nil, ErrCertPEM
		}
		block, rest := pem.Decode(data)
		if block == nil || block.Type != "CERTIFICATE" || len(block.Headers) != 0 || len(bytes.TrimSpace(rest)) != 0 {
			return nil, ErrCertPEM
		}
		der = block.Bytes
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCertDER, err)
	}
	return cert, nil
}

var (
	pemBegin = []byte("-----BEGIN CERTIFICATE-----")
	pemEnd   = []byte("-----END CERTIFICATE-----")
)

// pemFast decodes the common form (BEGIN line, base64 lines separated by
// LF or CRLF, END line) without the copies of encoding/pem. It reports false
// for anything else, which then goes through encoding/pem; when it succeeds,
// encoding/pem would have decoded the same bytes.
func pemFast(data []byte) ([]byte, bool) {
	if !bytes.HasPrefix(data, pemBegin) || !bytes.HasSuffix(data, pemEnd) || len(data) < len(pemBegin)+len(pemEnd)+2 {
		return nil, false
	}
	body := data[len(pemBegin) : len(data)-len(pemEnd)]
	// The body starts and ends with a line break and holds only base64
	// and line breaks (so no headers and no second block).
	if body[0] != '\n' && (body[0] != '\r' || body[1] != '\n') || body[len(body)-1] != '\n' {
		return nil, false
	}
	for _, c := range body {
		if !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '+' || c == '/' || c == '=' || c == '\n' || c == '\r') {
			return nil, false
		}
	}
	der := make([]byte, base64.StdEncoding.DecodedLen(len(body)))
	n, err := base64.StdEncoding.Decode(der, body) // skips \r and \n
	if err != nil || n == 0 {
		return nil, false
	}
	return der[:n], true
}

// Parse splits an XFCC header into elements. An empty header has zero
// elements. Any grammar error or exceeded bound is an error; the result is
// then nil. Keys and values are substrings of header (no copies).
func Parse(header string) ([]Element, error) {
	n := len(header)
	if n > MaxHeaderBytes {
		return nil, ErrTooLarge
	}
	if n == 0 {
		return nil, nil
	}
	// One backing array for every pair (an upper bound: separators inside
	// quotes count too); elements are windows of it.
	pairs := make([]Pair, 0, min(strings.Count(header, ";")+strings.Count(header, ",")+1, MaxPairs))
	elems := make([]Element, 0, 1)
	elemStart := 0
	for i := 0; ; {
		for i < n && (header[i] == ' ' || header[i] == '\t') {
			i++
		}
		keyStart := i
		for i < n && isKeyChar(header[i]) {
			i++
		}
		if i == keyStart {
			return nil, syntaxError(i, header, "expected a key")
		}
		if i >= n || header[i] != '=' {
			return nil, syntaxError(i, header, "expected '=' after the key")
		}
		p := Pair{Key: header[keyStart:i]}
		i++
		if i < n && header[i] == '"' {
			i++
			start := i
			for {
				for i < n && !quotedStop[header[i]] {
					i++
				}
				if i >= n {
					return nil, &SyntaxError{Offset: start - 1, Msg: "unterminated quoted value"}
				}
				c := header[i]
				if c == '"' {
					break
				}
				if c != '\\' {
					return nil, syntaxError(i, header, "control character")
				}
				if i+1 >= n {
					return nil, &SyntaxError{Offset: start - 1, Msg: "unterminated quoted value"}
				}
				if isCTL(header[i+1]) {
					return nil, syntaxError(i+1, header, "control character")
				}
				i += 2
			}
			p.Value, p.Quoted = header[start:i], true
			i++ // closing quote
		} else {
			start := i
			for i < n && !unquotedStop[header[i]] {
				i++
			}
			if i < n && header[i] != ';' && header[i] != ',' {
				if header[i] == '"' {
					return nil, syntaxError(i, header, "quote inside an unquoted value")
				}
				return nil, syntaxError(i, header, "control character")
			}
			p.Value = header[start:i]
		}
		if len(pairs)-elemStart >= MaxPairsPerElement || len(pairs) >= MaxPairs {
			return nil, ErrTooManyPairs
		}
		pairs = append(pairs, p)
		if i >= n {
			return append(elems, pairs[elemStart:len(pairs):len(pairs)]), nil
		}
		switch header[i] {
		case ';':
		case ',':
			if len(elems)+1 >= MaxElements {
				return nil, ErrTooManyElements
			}
			elems = append(elems, pairs[elemStart:len(pairs):len(pairs)])
			elemStart = len(pairs)
		default:
			return nil, syntaxError(i, header, "expected ';' or ',' after a quoted value")
		}
		i++
	}
}

// Byte classes of the value scanners: where an unquoted value ends (or is
// malformed), and where a quoted value needs a closer look.
var unquotedStop, quotedStop = func() (u, q [256]bool) {
	for c := range 256 {
		ctl := isCTL(byte(c))
		u[c] = ctl || c == ';' || c == ',' || c == '"'
		q[c] = ctl || c == '"' || c == '\\'
	}
	return u, q
}()

// Format writes elements in the XFCC grammar; values are quoted as they
// were parsed. Parse(Format(Parse(h))) yields the same elements as Parse(h).
func Format(elems []Element) string {
	var b strings.Builder
	for ei, e := range elems {
		if ei > 0 {
			b.WriteByte(',')
		}
		for pi, p := range e {
			if pi > 0 {
				b.WriteByte(';')
			}
			b.WriteString(p.Key)
			b.WriteByte('=')
			if p.Quoted {
				b.WriteByte('"')
				b.WriteString(p.Value)
				b.WriteByte('"')
			} else {
				b.WriteString(p.Value)
			}
		}
	}
	return b.String()
}

func isKeyChar(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.'
}

// isCTL reports ASCII control characters (tab included: it is allowed only
// as optional whitespace before a key).
func isCTL(c byte) bool { return c < 0x20 || c == 0x7f }

func syntaxError(off int, header, msg string) *SyntaxError {
	if off >= len(header) {
		return &SyntaxError{Offset: off, Msg: msg + " (end of header)"}
	}
	return &SyntaxError{Offset: off, Msg: fmt.Sprintf("%s (found %q)", msg, header[off])}
}
