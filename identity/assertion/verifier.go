package assertion

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// MaxKeys bounds the public keys of a key set file.
const MaxKeys = 8

type publicKey struct {
	pub ed25519.PublicKey
	id  KeyID
}

// keySet is the keys a Verifier accepts: those of its key set file and
// those of the file before.
type keySet struct {
	cur, prev []publicKey
}

func (ks *keySet) find(id KeyID) ed25519.PublicKey {
	for _, l := range [2][]publicKey{ks.cur, ks.prev} {
		for _, k := range l {
			if k.id == id {
				return k.pub
			}
		}
	}
	return nil
}

// Verifier checks signature headers against a key set. Safe for
// concurrent use.
type Verifier struct {
	now  func() time.Time
	keys atomic.Pointer[keySet]
}

// NewVerifier returns a Verifier accepting the keys pubs; now is the clock
// (time.Now when nil).
func NewVerifier(pubs []ed25519.PublicKey, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	v := &Verifier{now: now}
	v.keys.Store(&keySet{cur: publicKeys(pubs)})
	return v
}

func publicKeys(pubs []ed25519.PublicKey) []publicKey {
	ks := make([]publicKey, 0, len(pubs))
	for _, p := range pubs {
		ks = append(ks, publicKey{pub: p, id: IDOf(p)})
	}
	return ks
}

// SetKeys makes pubs the key set; the keys of the set before it stay
// accepted until the next SetKeys (a signer's old key signs for its grace
// after the new one was published).
func (v *Verifier) SetKeys(pubs []ed25519.PublicKey) {
	old := v.keys.Load()
	cur := publicKeys(pubs)
	var prev []publicKey
	for _, k := range old.cur {
		if (&keySet{cur: cur}).find(k.id) == nil {
			prev = append(prev, k)
		}
	}
	v.keys.Store(&keySet{cur: cur, prev: prev})
}

// KeyIDs lists the IDs of the keys accepted now (the key set's, then the
// previous set's).
func (v *Verifier) KeyIDs() []string {
	ks := v.keys.Load()
	var ids []string
	for _, l := range [2][]publicKey{ks.cur, ks.prev} {
		for _, k := range l {
			ids = append(ids, k.id.String())
		}
	}
	return ids
}

// Verify checks header (the value of contract.HeaderIdentitySignature, ""
// when absent) against c: nil, or a *Refusal.
func (v *Verifier) Verify(header string, c Claims) error {
	if header == "" {
		return &Refusal{contract.ReasonSignatureMissing, "no " + contract.HeaderIdentitySignature + " header: the identity was not asserted by ext-authz"}
	}
	h, err := ParseHeader(header)
	if err != nil {
		return &Refusal{contract.ReasonSignatureMalformed, err.Error()}
	}
	now := v.now()
	signed := time.Unix(h.Time, 0)
	if age := now.Sub(signed); age > Validity || age < -MaxSkew {
		return &Refusal{contract.ReasonSignatureExpired, "signed " + strconv.FormatInt(int64(age/time.Second), 10) +
			"s ago; taken from " + strconv.Itoa(int(-MaxSkew/time.Second)) + "s to " + strconv.Itoa(int(Validity/time.Second)) + "s"}
	}
	pub := v.keys.Load().find(h.KeyID)
	if pub == nil {
		return &Refusal{contract.ReasonSignatureUnknownKey, "signed with key " + h.KeyID.String() + ", not in the key set"}
	}
	if !c.bounded() {
		return &Refusal{contract.ReasonSignatureInvalid, "claims too large"}
	}
	var buf [512]byte
	if !ed25519.Verify(pub, message(buf[:0], h.Time, c), h.Signature[:]) {
		return &Refusal{contract.ReasonSignatureInvalid, "the signature is not over this request's runtime, SKR domain, method and path"}
	}
	return nil
}

var (
	runtimeIDKey = textproto.CanonicalMIMEHeaderKey(contract.HeaderRuntimeID)
	skrDomainKey = textproto.CanonicalMIMEHeaderKey(contract.HeaderSKRDomain)
	signatureKey = textproto.CanonicalMIMEHeaderKey(contract.HeaderIdentitySignature)
)

// VerifyRequest checks the signature of an HTTP request as it reached the
// upstream: over its x-watcher-runtime-id and x-watcher-skr-domain headers,
// its method and its request target. Each header must appear at most once
// (several are a refusal: a route added one). It returns the signed
// runtime ID.
func (v *Verifier) VerifyRequest(r *http.Request) (string, error) {
	one := func(key string) (string, bool) {
		vals := r.Header[key]
		if len(vals) > 1 {
			return "", false
		}
		if len(vals) == 0 {
			return "", true
		}
		return vals[0], true
	}
	sig, ok1 := one(signatureKey)
	id, ok2 := one(runtimeIDKey)
	dom, ok3 := one(skrDomainKey)
	if !ok1 || !ok2 || !ok3 {
		return "", &Refusal{contract.ReasonSignatureInvalid, "an identity header appears more than once"}
	}
	path := r.RequestURI
	if path == "" { // a request built in process, not read from the wire
		path = r.URL.RequestURI()
	}
	if err := v.Verify(sig, Claims{RuntimeID: id, SKRDomain: dom, Method: r.Method, Path: path}); err != nil {
		return "", err
	}
	return id, nil
}

// ParseKeySet reads the public keys of a PEM key set: CERTIFICATE blocks
// with an Ed25519 key (as cert-manager writes tls.crt for algorithm
// Ed25519; only the key is used, the certificate's validity and issuer are
// not) and PUBLIC KEY blocks (PKIX). Other blocks are ignored; at least one
// key and at most MaxKeys.
func ParseKeySet(data []byte) ([]ed25519.PublicKey, error) {
	var pubs []ed25519.PublicKey
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			break
		}
		var k any
		switch b.Type {
		case "CERTIFICATE":
			c, err := x509.ParseCertificate(b.Bytes)
			if err != nil {
				return nil, fmt.Errorf("certificate: %w", err)
			}
			k = c.PublicKey
		case "PUBLIC KEY":
			var err error
			if k, err = x509.ParsePKIXPublicKey(b.Bytes); err != nil {
				return nil, fmt.Errorf("public key: %w", err)
			}
		default:
			continue
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("key is %T, not Ed25519", k)
		}
		if len(pubs) == MaxKeys {
			return nil, fmt.Errorf("more than %d keys", MaxKeys)
		}
		pubs = append(pubs, pub)
	}
	if len(pubs) == 0 {
		return nil, errors.New("no Ed25519 CERTIFICATE or PUBLIC KEY block")
	}
	return pubs, nil
}

// VerifierFromFile loads the key set file path (an unusable file is an
// error) into a new Verifier, and returns the Watcher that gives it the
// file's new key sets while it runs (run it).
func VerifierFromFile(path string, log logr.Logger) (*Verifier, *filewatch.Watcher, error) {
	var v *Verifier
	w := &filewatch.Watcher{Name: "identity key set file", Paths: []string{path}, Log: log,
		Load: func(contents [][]byte) error {
			pubs, err := ParseKeySet(contents[0])
			if err != nil {
				return err
			}
			if v == nil {
				v = NewVerifier(pubs, nil)
			} else {
				v.SetKeys(pubs)
			}
			log.Info("identity key set loaded", "keyIDs", v.KeyIDs())
			return nil
		}}
	if err := w.Init(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, w, nil
}
