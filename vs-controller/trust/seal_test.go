package trust_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

// poison appends certs (PEM) and seals (lines) to the trust store, as
// somebody who may write ConfigMaps in the Kyma namespace can.
func poison(t *testing.T, c client.Client, pemCerts []byte, seals string) {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), storeKey, cm); err != nil {
		t.Fatal(err)
	}
	cm.Data[trust.StoreKey] += string(pemCerts)
	cm.Data[trust.SealKey] += seals
	if err := c.Update(context.Background(), cm); err != nil {
		t.Fatal(err)
	}
}

func storeHolds(t *testing.T, c client.Client) []string {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), storeKey, cm); err != nil {
		t.Fatal(err)
	}
	certs, _ := trust.ParseBundle([]byte(cm.Data[trust.StoreKey]))
	var out []string
	for _, c := range certs {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

// TestPoisonedStoreRefused: the trust store remembers, it never adds
// (docs/certificates.md, "The trust store"). CAs written into the store
// ConfigMap by somebody else — unsealed, sealed with another key, sealed
// for the other anchor — and a certificate that is no CA are refused after
// a restart even while every CA counts as in use (a runtime's SKR state
// unknown); the CAs vs-controller saw in the CA Secret are remembered, and
// the store is rewritten without the others.
func TestPoisonedStoreRefused(t *testing.T) {
	forgetCAs("poison-test")
	c := fake.NewClientBuilder().Build()
	ca1, ca2 := pki.MustCA(t, "ca-1"), pki.MustCA(t, "ca-2")
	evil, other := pki.MustCA(t, "evil"), pki.MustCA(t, "other-anchor")
	leaf, err := evil.Issue(pki.LeafOptions{CommonName: "not-a-ca"})
	if err != nil {
		t.Fatal(err)
	}
	// Every CA is in use: what a restart with a runtime's SKR state
	// unknown gives.
	allInUse := func(_ context.Context, cas []*x509.Certificate) ([]bool, error) {
		out := make([]bool, len(cas))
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	rec := events.NewFakeRecorder(10)
	newAnchor := func() *trust.Anchor {
		return &trust.Anchor{Name: "poison-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(),
			Recorder: rec, Seal: &trust.Seal{Client: c, Secret: sealKey}, InUse: allInUse}
	}
	a := newAnchor()
	setSecret(t, c, map[string][]byte{"tls.crt": ca1.PEM})
	refresh(t, a)
	setSecret(t, c, map[string][]byte{"tls.crt": ca2.PEM})
	refresh(t, a)
	if got := strings.Join(held(a), ","); got != "ca-1,ca-2" {
		t.Fatalf("before the attack: %v", got)
	}

	// The attack: an extra CA without a seal, one sealed with a key of the
	// attacker's, one with the seal of another anchor, and a leaf.
	forged, err := (&trust.Seal{Client: fake.NewClientBuilder().Build(), Secret: sealKey}).Sign(context.Background(), "poison-test", []*x509.Certificate{evil.Cert, leaf.Cert})
	if err != nil {
		t.Fatal(err)
	}
	otherSeal, err := (&trust.Seal{Client: c, Secret: sealKey}).Sign(context.Background(), "gateway", []*x509.Certificate{other.Cert})
	if err != nil {
		t.Fatal(err)
	}
	poison(t, c, append(append(append([]byte(nil), evil.PEM...), other.PEM...), leaf.CertPEM...), forged+otherSeal)
	refused := testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("poison-test"))

	b := newAnchor()
	refresh(t, b)
	if got := strings.Join(held(b), ","); got != "ca-1,ca-2" {
		t.Fatalf("after a restart on the poisoned store: %v, want ca-1,ca-2", got)
	}
	if got := strings.Join(storeHolds(t, c), ","); got != "ca-1,ca-2" {
		t.Errorf("store after the restart holds %v, want it rewritten to ca-1,ca-2", got)
	}
	if got := testutil.ToFloat64(vsmetrics.TrustStoreRefused.WithLabelValues("poison-test")) - refused; got != 3 {
		t.Errorf("trust_store_refused_total rose by %v, want 3", got)
	}
	events := 0
	for len(rec.Events) > 0 {
		if e := <-rec.Events; strings.Contains(e, trust.ReasonRefusedStoreEntry) {
			events++
		}
	}
	if events != 3 {
		t.Errorf("%d %s Events, want 3", events, trust.ReasonRefusedStoreEntry)
	}

	// Written again while vs-controller runs: the store is repaired at the
	// next pass, and what is held never grows from it.
	poison(t, c, evil.PEM, forged)
	refresh(t, b)
	if got := strings.Join(held(b), ","); got != "ca-1,ca-2" {
		t.Errorf("held after a second poisoning: %v", got)
	}
	if got := strings.Join(storeHolds(t, c), ","); got != "ca-1,ca-2" {
		t.Errorf("store after the next pass holds %v, want ca-1,ca-2", got)
	}
}

// TestStoreWithoutSealKeyRemembersNothing: a store whose seals no key
// verifies (the seal key Secret deleted, a store from before the seals) is
// not trusted: only the CA Secret's CA is held.
func TestStoreWithoutSealKeyRemembersNothing(t *testing.T) {
	forgetCAs("unsealed-test")
	c := fake.NewClientBuilder().Build()
	old, cur := pki.MustCA(t, "old"), pki.MustCA(t, "current")
	if err := c.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeKey.Namespace, Name: storeKey.Name},
		Data:       map[string]string{trust.StoreKey: string(old.PEM)},
	}); err != nil {
		t.Fatal(err)
	}
	setSecret(t, c, map[string][]byte{"tls.crt": cur.PEM})
	for _, seal := range []*trust.Seal{nil, {Client: c, Secret: sealKey}} {
		a := &trust.Anchor{Name: "unsealed-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(), Seal: seal}
		refresh(t, a)
		if got := strings.Join(held(a), ","); got != "current" {
			t.Errorf("seal %v: held %v, want current", seal != nil, got)
		}
	}
}

// TestSealKeyTooShortFails: a key Secret with a short key is an error, not
// a weak seal.
func TestSealKeyTooShortFails(t *testing.T) {
	c := fake.NewClientBuilder().WithObjects(&corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: sealKey.Namespace, Name: sealKey.Name},
		Data:       map[string][]byte{"key": []byte("short")},
	}).Build()
	if _, err := (&trust.Seal{Client: c, Secret: sealKey}).Key(context.Background()); err == nil {
		t.Fatal("a 5-byte seal key was accepted")
	}
}

// TestCASecretMustHoldACAOfItsKey: a CA Secret whose tls.crt is no CA
// (a leaf), or not the certificate of its tls.key, is bad input: the trust
// held stays.
func TestCASecretMustHoldACAOfItsKey(t *testing.T) {
	forgetCAs("ca-secret-test")
	c := fake.NewClientBuilder().Build()
	good, evil := pki.MustCA(t, "good"), pki.MustCA(t, "evil")
	leaf, err := good.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	a := &trust.Anchor{Name: "ca-secret-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard()}
	setSecret(t, c, map[string][]byte{"tls.crt": good.PEM})
	refresh(t, a)
	for name, data := range map[string]map[string][]byte{
		"leaf":           {"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM},
		"key of another": {"tls.crt": evil.PEM, "tls.key": leaf.KeyPEM},
	} {
		setSecret(t, c, data)
		refresh(t, a)
		if got := strings.Join(held(a), ","); got != "good" {
			t.Errorf("%s: held %v, want good", name, got)
		}
		if v := testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues("ca-secret-test")); v != 0 {
			t.Errorf("%s: ca_secret_valid %v, want 0", name, v)
		}
	}
}

// TestRetiredCANotReplayed: a copy of the store saved while an old CA was
// still held (with its valid seals) and written back after the CA was
// retired does not bring the CA back after a restart, even while every CA
// counts as in use (issue 33: the seal had no epoch).
func TestRetiredCANotReplayed(t *testing.T) {
	forgetCAs("replay-test")
	c := fake.NewClientBuilder().Build()
	old, cur := pki.MustCA(t, "old"), pki.MustCA(t, "current")
	oldInUse := true
	inUse := func(_ context.Context, cas []*x509.Certificate) ([]bool, error) {
		out := make([]bool, len(cas))
		for i, ca := range cas {
			out[i] = oldInUse || ca.Subject.CommonName != "old"
		}
		return out, nil
	}
	newAnchor := func(use func(context.Context, []*x509.Certificate) ([]bool, error)) *trust.Anchor {
		return &trust.Anchor{Name: "replay-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(),
			Seal: &trust.Seal{Client: c, Secret: sealKey}, InUse: use}
	}
	a := newAnchor(inUse)
	setSecret(t, c, map[string][]byte{"tls.crt": old.PEM})
	refresh(t, a)
	setSecret(t, c, map[string][]byte{"tls.crt": cur.PEM})
	refresh(t, a)
	if got := strings.Join(held(a), ","); got != "old,current" {
		t.Fatalf("during the overlap: %v", got)
	}
	saved := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), storeKey, saved); err != nil {
		t.Fatal(err)
	}
	// A restart during the overlap remembers both (the seals hold).
	if got := strings.Join(held(refreshed(t, newAnchor(inUse))), ","); got != "old,current" {
		t.Fatalf("restart during the overlap: %v", got)
	}

	oldInUse = false // every runtime renewed: the old CA is retired
	refresh(t, a)
	if got := strings.Join(held(a), ","); got != "current" {
		t.Fatalf("after the retirement: %v", got)
	}
	// The attacker writes the saved store back.
	replay := &corev1.ConfigMap{}
	if err := c.Get(context.Background(), storeKey, replay); err != nil {
		t.Fatal(err)
	}
	replay.Data = saved.Data
	if err := c.Update(context.Background(), replay); err != nil {
		t.Fatal(err)
	}
	allInUse := func(_ context.Context, cas []*x509.Certificate) ([]bool, error) {
		out := make([]bool, len(cas))
		for i := range out {
			out[i] = true
		}
		return out, nil
	}
	if got := strings.Join(held(refreshed(t, newAnchor(allInUse))), ","); got != "current" {
		t.Errorf("restart on the replayed store: held %v, want current", got)
	}
	if got := strings.Join(storeHolds(t, c), ","); got != "current" {
		t.Errorf("store after the restart holds %v, want current", got)
	}
}

func refreshed(t *testing.T, a *trust.Anchor) *trust.Anchor {
	t.Helper()
	refresh(t, a)
	return a
}
