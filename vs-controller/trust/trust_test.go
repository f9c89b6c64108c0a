package trust_test

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

var (
	secretKey = types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-ca"}
	storeKey  = types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-trust"}
	sealKey   = types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-trust-seal"}
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
	forgetCAs("runtime-test")
	c := fake.NewClientBuilder().Build()
	ca1, ca2 := pki.MustCA(t, "ca-1"), pki.MustCA(t, "ca-2")
	inUse := map[string]bool{}
	newAnchor := func() *trust.Anchor {
		// A restart: a new Seal reads the key Secret the first one created.
		return &trust.Anchor{Name: "runtime-test", Client: c, Secret: secretKey, Store: storeKey, Log: logr.Discard(), Seal: &trust.Seal{Client: c, Secret: sealKey},
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
	if got := caNotAfter(t, "runtime-test"); len(got) != 2 || got[trust.Fingerprint(ca1.Cert)] != float64(ca1.Cert.NotAfter.Unix()) || got[trust.Fingerprint(ca2.Cert)] != float64(ca2.Cert.NotAfter.Unix()) {
		t.Errorf("ca_not_after_seconds during the overlap: %v, want both CAs' not-after", got)
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
	if got := caNotAfter(t, "runtime-test"); len(got) != 1 || got[trust.Fingerprint(ca2.Cert)] != float64(ca2.Cert.NotAfter.Unix()) {
		t.Errorf("ca_not_after_seconds after ca-1 left: %v, want only ca-2's not-after", got)
	}
	if got := string(b.Bundle()); got != string(ca2.PEM) {
		t.Fatalf("bundle %q", got)
	}
}

// forgetCAs removes anchor's ca_not_after_seconds series left by an
// earlier run of the test (-count): a new Anchor knows only its own.
func forgetCAs(anchor string) {
	vsmetrics.CANotAfter.DeletePartialMatch(prometheus.Labels{"anchor": anchor})
}

// caNotAfter is ca_not_after_seconds of anchor, by CA.
func caNotAfter(t *testing.T, anchor string) map[string]float64 {
	t.Helper()
	series, err := promtext.Collected(vsmetrics.CANotAfter, "anchor", "ca")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for k, v := range series {
		if ca, ok := strings.CutPrefix(k, anchor+"/"); ok {
			out[ca] = v
		}
	}
	return out
}

// logLines is a logger that keeps every line funcr writes.
func logLines() (logr.Logger, *[]string) {
	var lines []string
	return funcr.New(func(_, args string) { lines = append(lines, args) }, funcr.Options{}), &lines
}

// TestBadInputKeepsTrust: an unusable CA Secret never replaces the trust
// held, and is reported (docs/certificates.md, "Bad CA input"): one error log
// line naming the anchor, the Secret and the problem, one Warning Event
// InvalidCASecret on the Secret, ca_secret_valid 0 — once per problem, not
// at every poll; a repaired Secret sets ca_secret_valid back to 1.
func TestBadInputKeepsTrust(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	rec := events.NewFakeRecorder(10)
	logger, lines := logLines()
	a := &trust.Anchor{Name: "bad-input-test", Client: c, Secret: secretKey, Store: storeKey, Log: logger, Recorder: rec}
	ca := pki.MustCA(t, "good")
	good := map[string][]byte{"tls.crt": ca.PEM}
	setSecret(t, c, good)
	refresh(t, a)
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	expired, err := pki.NewCAValid("expired", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	notYet, err := pki.NewCAValid("not-yet", time.Now().Add(time.Hour), time.Now().Add(48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	events := func() []string {
		var out []string
		for {
			select {
			case ev := <-rec.Events:
				out = append(out, ev)
			default:
				return out
			}
		}
	}
	for _, tc := range []struct {
		name    string
		data    map[string][]byte // nil: the Secret is deleted
		problem string
	}{
		{"garbage", map[string][]byte{"tls.crt": []byte("garbage"), "ca.crt": []byte("garbage")}, "tls.crt: not PEM"},
		{"neither tls.crt nor ca.crt", map[string][]byte{"tls.key": []byte("k")}, "neither tls.crt nor ca.crt is set"},
		{"garbage ca.crt only", map[string][]byte{"ca.crt": []byte("garbage")}, "ca.crt: not PEM"},
		{"not a CA", map[string][]byte{"tls.crt": leaf.CertPEM}, `tls.crt: "CN=leaf" is not a CA certificate`},
		{"cut short", map[string][]byte{"tls.crt": ca.PEM[:len(ca.PEM)/2]}, "tls.crt: not PEM"},
		{"wrong type", map[string][]byte{"tls.crt": leaf.KeyPEM}, `tls.crt: PEM block "EC PRIVATE KEY" is not a CERTIFICATE`},
		{"expired CA", map[string][]byte{"tls.crt": expired.PEM}, `tls.crt: CA "CN=expired" expired at`},
		{"CA not valid yet", map[string][]byte{"ca.crt": notYet.PEM}, `ca.crt: CA "CN=not-yet" is not valid before`},
		{"deleted", nil, "CA Secret does not exist"},
	} {
		// From a good Secret each time: a problem is reported once.
		setSecret(t, c, good)
		refresh(t, a)
		if v := testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues("bad-input-test")); v != 1 {
			t.Errorf("%s: ca_secret_valid %v before", tc.name, v)
		}
		events()
		*lines = nil

		if tc.data == nil {
			if err := c.Delete(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: secretKey.Namespace, Name: secretKey.Name}}); err != nil {
				t.Fatal(err)
			}
		} else {
			setSecret(t, c, tc.data)
		}
		for pass := range 2 { // the second poll reports nothing new
			if refresh(t, a) || string(a.Bundle()) != string(ca.PEM) || a.Current() == nil || a.Current().Subject.CommonName != "good" {
				t.Errorf("%s: trust changed to %v", tc.name, held(a))
			}
			if v := testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues("bad-input-test")); v != 0 {
				t.Errorf("%s: ca_secret_valid %v", tc.name, v)
			}
			evs := events()
			if pass == 1 {
				if len(evs) != 0 || len(*lines) != 1 {
					t.Errorf("%s: the same problem reported again: events %q, log %q", tc.name, evs, *lines)
				}
				continue
			}
			wantEvent := "Warning " + trust.ReasonInvalidCA + " CA Secret kcp-system/runtime-watcher-ca is unusable, the trust bundle is kept as it was: " + tc.problem
			if len(evs) != 1 || !strings.HasPrefix(evs[0], wantEvent) {
				t.Errorf("%s: events %q, want one starting %q", tc.name, evs, wantEvent)
			}
			if len(*lines) != 1 {
				t.Errorf("%s: log %q, want one line", tc.name, *lines)
				continue
			}
			for _, want := range []string{`"msg"="CA Secret is unusable; the trust bundle is kept as it was"`,
				`"error"="` + strings.ReplaceAll(tc.problem, `"`, `\"`), `"anchor"="bad-input-test"`, `"secret"="kcp-system/runtime-watcher-ca"`} {
				if !strings.Contains((*lines)[0], want) {
					t.Errorf("%s: log line %q lacks %s", tc.name, (*lines)[0], want)
				}
			}
		}
	}
	setSecret(t, c, good)
	refresh(t, a)
	if v := testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues("bad-input-test")); v != 1 {
		t.Errorf("ca_secret_valid %v after repair", v)
	}
}

func TestExpiredCALeavesTheBundle(t *testing.T) {
	forgetCAs("expiry-test")
	c := fake.NewClientBuilder().Build()
	cur := pki.MustCA(t, "current")
	old, err := pki.NewCAValid("old", time.Now().Add(-48*time.Hour), time.Now().Add(-time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	// A store that remembers an expired CA (vs-controller saw it).
	seal := &trust.Seal{Client: c, Secret: sealKey}
	seals, err := seal.Sign(context.Background(), "expiry-test", []*x509.Certificate{old.Cert})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: storeKey.Namespace, Name: storeKey.Name},
		Data:       map[string]string{trust.StoreKey: string(old.PEM), trust.SealKey: seals},
	}); err != nil {
		t.Fatal(err)
	}
	setSecret(t, c, map[string][]byte{"tls.crt": cur.PEM})
	logger, lines := logLines()
	a := &trust.Anchor{Name: "expiry-test", Client: c, Secret: secretKey, Store: storeKey, Log: logger, Seal: seal}
	refresh(t, a)
	if strings.Join(held(a), ",") != "current" {
		t.Fatalf("held %v", held(a))
	}
	dropped := 0
	for _, l := range *lines {
		if strings.Contains(l, `"msg"="CA expired: dropped from the trust bundle"`) && strings.Contains(l, `"anchor"="expiry-test"`) && strings.Contains(l, `"subject"="CN=old"`) {
			dropped++
		}
	}
	if dropped != 1 {
		t.Errorf("log %q: want one line for the expired CA dropped", *lines)
	}
	if got := caNotAfter(t, "expiry-test"); len(got) != 1 || got[trust.Fingerprint(cur.Cert)] != float64(cur.Cert.NotAfter.Unix()) {
		t.Errorf("ca_not_after_seconds{anchor=\"expiry-test\"} %v, want only the current CA's not-after", got)
	}
	var cm corev1.ConfigMap
	if err := c.Get(context.Background(), storeKey, &cm); err != nil || cm.Data[trust.StoreKey] != string(cur.PEM) {
		t.Fatalf("store %v %v", cm.Data, err)
	}
}
