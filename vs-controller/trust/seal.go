package trust

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/apply"
)

// SealKey is the trust store ConfigMap key holding the seals of the CAs
// under StoreKey: one hex HMAC-SHA256 per line.
const SealKey = "ca-bundle.seal"

// sealKeyBytes is the length of the seal key.
const sealKeyBytes = 32

// Seal proves that a CA remembered in a trust store ConfigMap was put there
// by vs-controller after it saw the CA in the CA Secret (docs/certificates.md,
// "The trust store"). A store's CA is admitted after a restart only with
// its seal: an HMAC-SHA256, over the anchor's name and the certificate, keyed
// by 32 random bytes in a Secret vs-controller creates beside the gateway's
// client CA Secret. Whoever can write the ConfigMap but cannot read Secrets
// in the gateway's namespace — where the gateway's private key lives too —
// cannot forge one, so the store remembers but never adds.
type Seal struct {
	// Client reads and creates the key Secret (uncached).
	Client client.Client
	// Secret holds the key (data key "key"); created when missing.
	Secret types.NamespacedName

	mu  sync.Mutex
	key []byte
}

// Key is the seal key, read (or created) once.
func (s *Seal) Key(ctx context.Context) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.key != nil {
		return s.key, nil
	}
	sec := &corev1.Secret{}
	err := s.Client.Get(ctx, s.Secret, sec)
	if apierrors.IsNotFound(err) {
		key := make([]byte, sealKeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, err
		}
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: s.Secret.Namespace, Name: s.Secret.Name,
				Labels: map[string]string{contract.LabelManagedBy: apply.FieldOwner}},
			Data: map[string][]byte{"key": key},
		}
		err = s.Client.Create(ctx, sec)
		if apierrors.IsAlreadyExists(err) {
			err = s.Client.Get(ctx, s.Secret, sec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("trust store seal key Secret %s: %w", s.Secret, err)
	}
	if len(sec.Data["key"]) < sealKeyBytes {
		return nil, fmt.Errorf("trust store seal key Secret %s: key holds %d bytes, want %d", s.Secret, len(sec.Data["key"]), sealKeyBytes)
	}
	s.key = sec.Data["key"]
	return s.key, nil
}

// sum is the seal of a CA in the store of anchor.
func sum(key []byte, anchor string, c *x509.Certificate) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("runtime-watcher trust store\x00" + anchor + "\x00"))
	m.Write(c.Raw)
	return hex.EncodeToString(m.Sum(nil))
}

// Sign is the SealKey value for the CAs cas of anchor.
func (s *Seal) Sign(ctx context.Context, anchor string, cas []*x509.Certificate) (string, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range cas {
		b.WriteString(sum(key, anchor, c) + "\n")
	}
	return b.String(), nil
}

// Sealed reports which of cas carry their seal in seals (a SealKey value).
func (s *Seal) Sealed(ctx context.Context, anchor string, cas []*x509.Certificate, seals string) ([]bool, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(seals) {
		have[l] = true
	}
	out := make([]bool, len(cas))
	for i, c := range cas {
		out[i] = have[sum(key, anchor, c)]
	}
	return out, nil
}
