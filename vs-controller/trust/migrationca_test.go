package trust_test

import (
	"context"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

var lmCAKey = types.NamespacedName{Namespace: "istio-system", Name: "klm-watcher"}

// lmFixtureCAs is the ca.crt of LM's SKR Secret in the fixtures: LM's two
// made-up CAs "klm-watcher-selfsigned-ca" (new, old).
func lmFixtureCAs(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "test", "fixtures", "lifecycle-manager", "skr-bundle", "secret-skr-webhook-tls-rendered.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var s corev1.Secret
	if err := yaml.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	if len(s.Data["ca.crt"]) == 0 {
		t.Fatal("fixture Secret has no ca.crt")
	}
	return s.Data["ca.crt"]
}

func TestParseCAs(t *testing.T) {
	now := time.Now()
	ca := pki.MustCA(t, "ca")
	expired, err := pki.NewCAValid("expired", now.Add(-2*time.Hour), now.Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "leaf"})
	if err != nil {
		t.Fatal(err)
	}
	lm := lmFixtureCAs(t)
	for name, tc := range map[string]struct {
		data    []byte
		want    int
		problem string
	}{
		"LM's fixture CAs":      {data: lm, want: 2},
		"one CA":                {data: ca.PEM, want: 1},
		"duplicates":            {data: append(append([]byte{}, ca.PEM...), ca.PEM...), want: 1},
		"expired one left out":  {data: append(append([]byte{}, expired.PEM...), ca.PEM...), want: 1},
		"only expired":          {data: expired.PEM, problem: "no CA certificate valid now"},
		"empty":                 {problem: "not set"},
		"garbage":               {data: []byte("garbage"), problem: "not PEM"},
		"a leaf":                {data: append(append([]byte{}, ca.PEM...), leaf.CertPEM...), problem: "not a CA"},
		"a key":                 {data: append(append([]byte{}, ca.PEM...), leaf.KeyPEM...), problem: "not a CERTIFICATE"},
		"cut short after a CA:": {data: append(append([]byte{}, ca.PEM...), lm[:len(lm)/3]...), problem: "not PEM"},
	} {
		cas, problem := trust.ParseCAs(tc.data, now)
		if len(cas) != tc.want || !strings.Contains(problem, tc.problem) || (tc.problem == "") != (problem == "") {
			t.Errorf("%s: %d CAs, problem %q; want %d, %q", name, len(cas), problem, tc.want, tc.problem)
		}
	}
}

func TestMerge(t *testing.T) {
	a, b := pki.MustCA(t, "a"), pki.MustCA(t, "b")
	out, added := trust.Merge(a.PEM, nil)
	if string(out) != string(a.PEM) || added != 0 {
		t.Errorf("no extra: %q, %d", out, added)
	}
	out, added = trust.Merge(a.PEM, []*x509.Certificate{b.Cert, a.Cert, b.Cert})
	if added != 1 {
		t.Errorf("added %d, want 1 (a is in the base, b twice)", added)
	}
	cs, _ := trust.ParseBundle(out)
	var got []string
	for _, c := range cs {
		got = append(got, c.Subject.CommonName)
	}
	if strings.Join(got, ",") != "a,b" {
		t.Errorf("merged bundle %v, want a then b", got)
	}
}

func TestMigrationCAFailsClosedAndReports(t *testing.T) {
	c := fake.NewClientBuilder().Build()
	rec := events.NewFakeRecorder(10)
	e := &trust.MigrationCA{Client: c, Secret: lmCAKey, Recorder: rec, Log: logr.Discard()}
	ctx := context.Background()
	valid := func() float64 {
		return testutil.ToFloat64(vsmetrics.CASecretValid.WithLabelValues(trust.MigrationAnchorName))
	}
	expectEvent := func(name string) {
		t.Helper()
		select {
		case ev := <-rec.Events:
			if !strings.Contains(ev, trust.ReasonInvalidMigrationCA) || !strings.Contains(ev, lmCAKey.String()) {
				t.Errorf("%s: event %q", name, ev)
			}
		default:
			t.Errorf("%s: no event", name)
		}
	}

	cas, err := e.Read(ctx)
	if err != nil || len(cas) != 0 || valid() != 0 {
		t.Fatalf("missing Secret: %d CAs, %v, valid %v", len(cas), err, valid())
	}
	expectEvent("missing")
	if _, _ = e.Read(ctx); len(rec.Events) != 0 {
		t.Errorf("the same problem is reported once, not every pass")
	}

	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: lmCAKey.Namespace, Name: lmCAKey.Name},
		Data: map[string][]byte{"ca.crt": lmFixtureCAs(t)}}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	if cas, err = e.Read(ctx); err != nil || len(cas) != 2 || valid() != 1 {
		t.Fatalf("LM's CA Secret: %d CAs, %v, valid %v", len(cas), err, valid())
	}
	if cas[0].Subject.CommonName != "klm-watcher-selfsigned-ca" {
		t.Errorf("CA %q", cas[0].Subject.CommonName)
	}

	s.Data["ca.crt"] = []byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n")
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if cas, err = e.Read(ctx); err != nil || len(cas) != 0 || valid() != 0 {
		t.Fatalf("garbage: %d CAs, %v, valid %v: must fail closed", len(cas), err, valid())
	}
	expectEvent("garbage")

	// An API failure keeps the last read's CAs (no flapping on a blip).
	s.Data["ca.crt"] = lmFixtureCAs(t)
	if err := c.Update(ctx, s); err != nil {
		t.Fatal(err)
	}
	if cas, _ = e.Read(ctx); len(cas) != 2 {
		t.Fatalf("repaired: %d CAs", len(cas))
	}
	failing := fake.NewClientBuilder().WithInterceptorFuncs(interceptor.Funcs{
		Get: func(context.Context, client.WithWatch, client.ObjectKey, client.Object, ...client.GetOption) error {
			return errors.New("connection refused")
		},
	}).Build()
	e.Client = failing
	if cas, err = e.Read(ctx); err == nil || len(cas) != 2 {
		t.Errorf("API failure: %d CAs, %v; want the last read's 2 and the error", len(cas), err)
	}
}
