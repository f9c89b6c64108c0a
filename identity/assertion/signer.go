package assertion

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// DefaultGrace is how long a Signer keeps signing with its old key after
// its key file changed: above kubelet's delay in updating a Secret volume
// (its sync period, one minute by default, plus its cache), so every
// verifier holds the new public key before a signature needs it.
const DefaultGrace = 2 * time.Minute

type signingKey struct {
	priv ed25519.PrivateKey
	id   KeyID
}

// signerState is the key in use and the key that replaces it once grace
// has passed since since.
type signerState struct {
	cur, next *signingKey
	since     time.Time
}

// Signer signs claims with the key in use. Safe for concurrent use.
type Signer struct {
	now   func() time.Time
	grace time.Duration
	state atomic.Pointer[signerState]
}

// NewSigner returns a Signer of priv that, when SetKey gives it a new key,
// signs with the old one for grace more (DefaultGrace when 0). now is the
// clock (time.Now when nil).
func NewSigner(priv ed25519.PrivateKey, grace time.Duration, now func() time.Time) *Signer {
	if now == nil {
		now = time.Now
	}
	if grace <= 0 {
		grace = DefaultGrace
	}
	s := &Signer{now: now, grace: grace}
	s.state.Store(&signerState{cur: newSigningKey(priv)})
	return s
}

func newSigningKey(priv ed25519.PrivateKey) *signingKey {
	return &signingKey{priv: priv, id: IDOf(priv.Public().(ed25519.PublicKey))}
}

// SetKey makes priv the key that signs once the grace has passed; until
// then the key in use goes on signing. The same key again changes nothing.
func (s *Signer) SetKey(priv ed25519.PrivateKey) {
	k := newSigningKey(priv)
	for {
		old := s.state.Load()
		cur := s.current(old)
		if cur.id == k.id {
			if s.state.CompareAndSwap(old, &signerState{cur: cur}) {
				return
			}
			continue
		}
		if s.state.CompareAndSwap(old, &signerState{cur: cur, next: k, since: s.now()}) {
			return
		}
	}
}

// current is the key that signs now in st (the next one once its grace
// has passed).
func (s *Signer) current(st *signerState) *signingKey {
	if st.next != nil && s.now().Sub(st.since) >= s.grace {
		return st.next
	}
	return st.cur
}

// KeyID is the ID of the key that signs now.
func (s *Signer) KeyID() KeyID { return s.current(s.state.Load()).id }

// Sign returns the header value asserting c now.
func (s *Signer) Sign(c Claims) string {
	st := s.state.Load()
	k := s.current(st)
	if k != st.cur {
		s.state.CompareAndSwap(st, &signerState{cur: k})
	}
	h := Header{Time: s.now().Unix(), KeyID: k.id}
	var buf [512]byte
	copy(h.Signature[:], ed25519.Sign(k.priv, message(buf[:0], h.Time, c)))
	return string(h.appendTo(buf[:0]))
}

// ParseSigningKey reads an Ed25519 private key from PEM: PKCS#8 ("PRIVATE
// KEY", as cert-manager writes tls.key for algorithm Ed25519).
func ParseSigningKey(data []byte) (ed25519.PrivateKey, error) {
	for {
		var b *pem.Block
		b, data = pem.Decode(data)
		if b == nil {
			return nil, errors.New("no PEM PRIVATE KEY block")
		}
		if b.Type != "PRIVATE KEY" {
			continue
		}
		k, err := x509.ParsePKCS8PrivateKey(b.Bytes)
		if err != nil {
			return nil, fmt.Errorf("private key: %w", err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("private key is %T, not Ed25519", k)
		}
		return priv, nil
	}
}

// SignerFromFile loads the Ed25519 key of the PEM file path (an unusable
// file is an error) into a new Signer, and returns the Watcher that gives
// it the file's new keys while it runs (run it; SetKey and its grace apply).
func SignerFromFile(path string, grace time.Duration, log logr.Logger) (*Signer, *filewatch.Watcher, error) {
	var s *Signer
	w := &filewatch.Watcher{Name: "identity signing key file", Paths: []string{path}, Log: log,
		Load: func(contents [][]byte) error {
			priv, err := ParseSigningKey(contents[0])
			if err != nil {
				return err
			}
			if s == nil {
				s = NewSigner(priv, grace, nil)
			} else {
				s.SetKey(priv)
			}
			log.Info("identity signing key loaded", "keyID", IDOf(priv.Public().(ed25519.PublicKey)).String(), "signsFrom", s.nextFrom().Format(time.RFC3339))
			return nil
		}}
	if err := w.Init(); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, w, nil
}

// nextFrom is when the newest key signs.
func (s *Signer) nextFrom() time.Time {
	st := s.state.Load()
	if st.next == nil {
		return s.now()
	}
	return st.since.Add(s.grace)
}
