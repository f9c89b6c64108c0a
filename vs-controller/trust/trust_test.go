package trust_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/metrics"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

var (
	secretKey = types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-ca"}
	storeKey  = types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-trust"}
)

func setSecret(t *testing.T, c client.Client, data map[string][]byte) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name}}
	if err := c.Get(context.Background(), secretKey, s); err == nil {
		s.Data = data
		if err := c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		return
	}
	s.Data = data
	if err := c.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func held(a *trust.Anchor) []string {
	var out []string
	for _, c := range a.CAs() {
		out = append(out, c.Subject.CommonName)
	}
	return out
}

func refresh(t *testing.T, a *trust.Anchor) bool {
	t.Helper()
	changed, err := a.Refresh(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return changed
}

func TestRotationKeepsOldUntilUnused(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	ca1, ca2 := newCA(t, "ca-1"), newCA(t, "ca-2")
	inUse := map[string]bool{}
	newAnchor := func() *trust.Anchor {
		return &trust.Anchor{Name: "runtime-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(),
			InUse: func(_ context.Context, cas []*x509.Certificate) ([]bool, error) {
				out := make([]bool, len(cas))
				for i, ca := range cas {
					out[i] = inUse[ca.Subject.CommonName]
				}
				return out, nil
			}}
	}
	a := newAnchor()
	setSecret(t, c, map[string][]byte{"tls.crt": ca1.PEM, "ca.crt": ca1.PEM})
	if !refresh(t, a) || strings.Join(held(a), ",") != "ca-1" {
		t.Fatalf("first CA: %v", held(a))
	}
	inUse["ca-1"] = true
	setSecret(t, c, map[string][]byte{"tls.crt": ca2.PEM, "ca.crt": ca2.PEM})
	if !refresh(t, a) || strings.Join(held(a), ",") != "ca-1,ca-2" || a.Current().Subject.CommonName != "ca-2" {
		t.Fatalf("overlap: %v", held(a))
	}
	// A restart remembers the old CA from the store.
	b := newAnchor()
	refresh(t, b)
	if strings.Join(held(b), ",") != "ca-1,ca-2" {
		t.Fatalf("after restart: %v", held(b))
	}
	// Every certificate moved to ca-2: ca-1 goes.
	inUse["ca-1"] = false
	if !refresh(t, b) || strings.Join(held(b), ",") != "ca-2" {
		t.Fatalf("after renewal: %v", held(b))
	}
	if got := string(b.Bundle()); got != string(ca2.PEM) {
		t.Fatalf("bundle %q", got)
	}
}

func TestBadInputKeepsTrust(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	rec := record.NewFakeRecorder(10)
	a := &trust.Anchor{Name: "bad-input-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(), Recorder: rec}
	ca := newCA(t, "good")
	setSecret(t, c, map[string][]byte{"tls.crt": ca.PEM})
	refresh(t, a)
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string]map[string][]byte{
		"garbage":    {"tls.crt": []byte("garbage"), "ca.crt": []byte("garbage")},
		"missing":    {"tls.key": []byte("k")},
		"not a CA":   {"tls.crt": leaf.CertPEM},
		"cut short":  {"tls.crt": ca.PEM[:len(ca.PEM)/2]},
		"wrong type": {"tls.crt": leaf.KeyPEM},
	} {
		setSecret(t, c, data)
		if refresh(t, a) || string(a.Bundle()) != string(ca.PEM) || a.Current() == nil || a.Current().Subject.CommonName != "good" {
			t.Errorf("%s: trust changed to %v", name, held(a))
		}
		if v := testutil.ToFloat64(metrics.CASecretValid.WithLabelValues("bad-input-test")); v != 0 {
			t.Errorf("%s: ca_secret_valid %v", name, v)
		}
		select {
		case ev := <-rec.Events:
			if !strings.Contains(ev, trust.ReasonInvalidCA) {
				t.Errorf("%s: event %q", name, ev)
			}
		default:
			t.Errorf("%s: no event", name)
		}
	}
	setSecret(t, c, map[string][]byte{"tls.crt": ca.PEM})
	refresh(t, a)
	if v := testutil.ToFloat64(metrics.CASecretValid.WithLabelValues("bad-input-test")); v != 1 {
		t.Errorf("ca_secret_valid %v after repair", v)
	}
}

func TestExpiredCALeavesTheBundle(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	cur := newCA(t, "current")
	old, err := pki.NewCAValid("old", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A store that remembers an expired CA.
	if err := c.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeKey.Namespace, Name: storeKey.Name},
		Data:       map[string]string{trust.StoreKey: string(old.PEM)},
	}); err != nil {
		t.Fatal(err)
	}
	setSecret(t, c, map[string][]byte{"tls.crt": cur.PEM})
	a := &trust.Anchor{Name: "expiry-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard()}
	refresh(t, a)
	if strings.Join(held(a), ",") != "current" {
		t.Fatalf("held %v", held(a))
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), storeKey, &cm); err != nil || cm.Data[trust.StoreKey] != string(cur.PEM) {
		t.Fatalf("store %v %v", cm.Data, err)
	}
}
