package trust

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
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
//
// A seal is also bound to its anchor's epoch, a counter kept in the same
// Secret ("epoch-<anchor>") and advanced whenever a CA leaves the anchor's
// bundle (Advance). A store saved before a CA was retired carries seals of
// an earlier epoch: written back, its entries are refused, so a retired CA
// cannot be replayed into the bundle. Epoch 0 seals as before epochs
// existed, so stores sealed by older versions stay valid until the first
// retirement.
type Seal struct {
	// Client reads and creates the key Secret (uncached).
	Client client.Client
	// Secret holds the key (data key "key"); created when missing.
	Secret types.NamespacedName

	mu     sync.Mutex
	key    []byte
	epochs map[string]uint64 // per anchor, read with the key
}

// epochKey is the key Secret's data key of anchor's epoch.
func epochKey(anchor string) string { return "epoch-" + anchor }

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
				Labels: map[string]string{contract.LabelManagedBy: diffapply.FieldOwner}},
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
	s.epochs = map[string]uint64{}
	for k, v := range sec.Data {
		if a, ok := strings.CutPrefix(k, "epoch-"); ok {
			n, err := strconv.ParseUint(string(v), 10, 64)
			if err != nil {
				return nil, fmt.Errorf("trust store seal key Secret %s: %s: %w", s.Secret, k, err)
			}
			s.epochs[a] = n
		}
	}
	return s.key, nil
}

// Reread makes the next use read the key Secret again: a replica that
// follows the elected one (Anchor.Load) sees the epochs it advances.
func (s *Seal) Reread() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.key, s.epochs = nil, nil
}

// Epoch is anchor's current epoch.
func (s *Seal) Epoch(ctx context.Context, anchor string) (uint64, error) {
	if _, err := s.Key(ctx); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.epochs[anchor], nil
}

// Advance moves anchor to its next epoch (stored in the key Secret): every
// seal signed before no longer verifies. Called when a CA leaves the
// anchor's bundle, before the store is sealed again.
func (s *Seal) Advance(ctx context.Context, anchor string) error {
	if _, err := s.Key(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	sec := &corev1.Secret{}
	if err := s.Client.Get(ctx, s.Secret, sec); err != nil {
		return fmt.Errorf("trust store seal key Secret %s: %w", s.Secret, err)
	}
	if !hmac.Equal(sec.Data["key"], s.key) {
		return fmt.Errorf("trust store seal key Secret %s: its key changed while vs-controller ran", s.Secret)
	}
	cur := uint64(0)
	if v, ok := sec.Data[epochKey(anchor)]; ok {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			return fmt.Errorf("trust store seal key Secret %s: %s: %w", s.Secret, epochKey(anchor), err)
		}
		cur = n
	}
	if cur < s.epochs[anchor] {
		cur = s.epochs[anchor]
	}
	next := cur + 1
	sec.Data[epochKey(anchor)] = []byte(strconv.FormatUint(next, 10))
	if err := s.Client.Update(ctx, sec); err != nil {
		return fmt.Errorf("advance the %s trust store epoch in Secret %s: %w", anchor, s.Secret, err)
	}
	s.epochs[anchor] = next
	return nil
}

// sum is the seal of a CA in the store of anchor at epoch (0: the seal of
// the versions before epochs).
func sum(key []byte, anchor string, epoch uint64, c *x509.Certificate) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("runtime-watcher trust store\x00" + anchor + "\x00"))
	if epoch > 0 {
		m.Write([]byte("epoch " + strconv.FormatUint(epoch, 10) + "\x00"))
	}
	m.Write(c.Raw)
	return hex.EncodeToString(m.Sum(nil))
}

// Sign is the SealKey value for the CAs cas of anchor.
func (s *Seal) Sign(ctx context.Context, anchor string, cas []*x509.Certificate) (string, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return "", err
	}
	epoch, err := s.Epoch(ctx, anchor)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for _, c := range cas {
		b.WriteString(sum(key, anchor, epoch, c) + "\n")
	}
	return b.String(), nil
}

// Sealed reports which of cas carry their seal in seals (a SealKey value).
func (s *Seal) Sealed(ctx context.Context, anchor string, cas []*x509.Certificate, seals string) ([]bool, error) {
	key, err := s.Key(ctx)
	if err != nil {
		return nil, err
	}
	epoch, err := s.Epoch(ctx, anchor)
	if err != nil {
		return nil, err
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(seals) {
		have[l] = true
	}
	out := make([]bool, len(cas))
	for i, c := range cas {
		out[i] = have[sum(key, anchor, epoch, c)]
	}
	return out, nil
}
