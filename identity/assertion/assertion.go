// Package assertion makes the identity ext-authz asserts on an allowed
// request verifiable downstream (docs/architecture.md, "The identity
// assertion"; docs/security.md, "Routes cannot speak for a runtime").
//
// Envoy applies a route's request headers after ext_authz, so a route bound
// to the watcher gateway could otherwise overwrite x-watcher-runtime-id (or
// x-forwarded-client-cert) and rewrite a path. On every allow ext-authz adds
// the header contract.HeaderIdentitySignature: an Ed25519 signature, by a
// key only ext-authz holds, over the runtime ID, the SKR domain, the
// request's method and path as ext-authz saw them, and the time it signed.
// A listener or vs-controller's health port holding the public key (a key
// set file) checks it: a route that set an identity header, rewrote the
// path or dropped the signature no longer verifies, and a signature is
// taken only for Validity after it was made (MaxSkew earlier at most).
//
// The header is
//
//	v1;t=<unix seconds>;k=<key ID, 16 hex digits>;s=<signature, base64url without padding>
//
// and the signed message is the domain separator "runtime-watcher identity
// v1" followed by the time and the four claims, each length-prefixed, so no
// choice of values makes two claims sets sign the same bytes.
//
// Keys rotate without a refusal: the Signer keeps signing with its old key
// for a grace period after its key file changed (long enough for every
// verifier's copy of the new public key to arrive), and a Verifier keeps
// the keys of its previous key set after a reload.
package assertion

import (
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Version is the first field of the header.
const Version = "v1"

// Validity is how long after it was made a signature is taken; MaxSkew is
// how far in the verifier's future its time may lie (the clocks of
// ext-authz's and the verifier's nodes may differ by that much).
const (
	Validity = 10 * time.Second
	MaxSkew  = 5 * time.Second
)

// MaxHeaderBytes bounds the header a verifier parses (a well-formed one is
// 126 bytes at most).
const MaxHeaderBytes = 256

// maxClaimBytes bounds each claim that is signed (a path is bounded by the
// gateway's header limits; the rest are names).
const maxClaimBytes = 8 << 10

// Claims are what a signature asserts about one request.
type Claims struct {
	RuntimeID string
	SKRDomain string
	Method    string
	// Path is the request target as ext-authz saw it (Envoy's :path, the
	// query included) and as the upstream receives it when no route
	// rewrote it (Go's http.Request.RequestURI).
	Path string
}

// KeyIDSize is the size of a key ID: the first bytes of the SHA-256 of the
// public key.
const KeyIDSize = 8

// KeyID names a public key in a header.
type KeyID [KeyIDSize]byte

// IDOf is the key ID of pub.
func IDOf(pub ed25519.PublicKey) KeyID {
	sum := sha256.Sum256(pub)
	var id KeyID
	copy(id[:], sum[:KeyIDSize])
	return id
}

// String is the ID in hex, as in the header.
func (id KeyID) String() string {
	const hexdigits = "0123456789abcdef"
	var b [2 * KeyIDSize]byte
	for i, c := range id {
		b[2*i], b[2*i+1] = hexdigits[c>>4], hexdigits[c&15]
	}
	return string(b[:])
}

// Header is a parsed signature header.
type Header struct {
	Time      int64 // Unix seconds
	KeyID     KeyID
	Signature [ed25519.SignatureSize]byte
}

const (
	prefix     = Version + ";t="
	keyField   = ";k="
	sigField   = ";s="
	sigB64Size = 86 // base64url without padding of 64 bytes
)

var b64 = base64.RawURLEncoding

// String formats h as the header value.
func (h Header) String() string {
	return string(h.appendTo(make([]byte, 0, 128)))
}

func (h Header) appendTo(b []byte) []byte {
	b = append(b, prefix...)
	b = strconv.AppendInt(b, h.Time, 10)
	b = append(b, keyField...)
	b = append(b, h.KeyID.String()...)
	b = append(b, sigField...)
	return b64.AppendEncode(b, h.Signature[:])
}

// errMalformed is every parse failure: the header is not one this version
// writes.
var errMalformed = errors.New("malformed identity signature header")

// ParseHeader parses a header value strictly: the version, a positive
// decimal time without leading zeros, 16 lowercase hex digits and 86
// base64url characters, in this order, nothing else.
func ParseHeader(s string) (Header, error) {
	var h Header
	if len(s) > MaxHeaderBytes || len(s) < len(prefix) || s[:len(prefix)] != prefix {
		return h, errMalformed
	}
	s = s[len(prefix):]
	i := 0
	for i < len(s) && i < 19 && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || (s[0] == '0') {
		return h, errMalformed
	}
	t, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return h, errMalformed
	}
	h.Time = t
	s = s[i:]
	if len(s) != len(keyField)+2*KeyIDSize+len(sigField)+sigB64Size || s[:len(keyField)] != keyField {
		return h, errMalformed
	}
	s = s[len(keyField):]
	for j := range KeyIDSize {
		hi, ok1 := unhex(s[2*j])
		lo, ok2 := unhex(s[2*j+1])
		if !ok1 || !ok2 {
			return h, errMalformed
		}
		h.KeyID[j] = hi<<4 | lo
	}
	s = s[2*KeyIDSize:]
	if s[:len(sigField)] != sigField {
		return h, errMalformed
	}
	// Strict: the last character carries no stray bits, so one signature
	// has one spelling.
	if n, err := b64.Strict().Decode(h.Signature[:], []byte(s[len(sigField):])); err != nil || n != ed25519.SignatureSize {
		return h, errMalformed
	}
	return h, nil
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}

// domain separates these signatures from anything else the key might sign.
const domain = "runtime-watcher identity " + Version

// message is what is signed: the domain separator, the time and each claim
// with its length.
func message(buf []byte, t int64, c Claims) []byte {
	buf = append(buf, domain...)
	buf = binary.BigEndian.AppendUint64(buf, uint64(t))
	for _, f := range [...]string{c.RuntimeID, c.SKRDomain, c.Method, c.Path} {
		buf = binary.BigEndian.AppendUint32(buf, uint32(len(f)))
		buf = append(buf, f...)
	}
	return buf
}

func (c Claims) bounded() bool {
	return len(c.RuntimeID) <= maxClaimBytes && len(c.SKRDomain) <= maxClaimBytes &&
		len(c.Method) <= maxClaimBytes && len(c.Path) <= maxClaimBytes
}

// Refusal is why a Verifier refused a signature: Reason is the contract
// deny reason a listener answers and the label of the refusal metrics.
type Refusal struct {
	Reason  contract.DenyReason
	Message string
}

func (r *Refusal) Error() string { return string(r.Reason) + ": " + r.Message }

// Reasons are the reasons of a Refusal, the bounded label set of the
// metrics that count them.
var Reasons = []contract.DenyReason{
	contract.ReasonSignatureMissing, contract.ReasonSignatureMalformed, contract.ReasonSignatureExpired,
	contract.ReasonSignatureUnknownKey, contract.ReasonSignatureInvalid,
}
