package trust

import (
	"context"
	"strings"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

const keeperNS = "kcp-system"

// keeperClient is a fake KCP holding Secrets, ConfigMaps and (metadata
// only) Kymas.
func keeperClient(t *testing.T) client.Client {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := corev1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := certmanagerv1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	scheme.AddKnownTypeWithName(v1beta2.KymaGroupVersionKind, &unstructured.Unstructured{})
	scheme.AddKnownTypeWithName(v1beta2.GroupVersion.WithKind("KymaList"), &unstructured.UnstructuredList{})
	return fake.NewClientBuilder().WithScheme(scheme).Build()
}

func mustLeaf(t *testing.T, ca *pki.CA, id string, notAfter time.Time) *pki.Leaf {
	t.Helper()
	l, err := ca.Issue(pki.LeafOptions{CommonName: id, NotAfter: notAfter})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// putSecret creates or updates Secret name in keeperNS (an update bumps its
// resourceVersion, as a re-issue does).
func putSecret(t *testing.T, c client.Client, name string, data map[string][]byte) {
	t.Helper()
	ctx := context.Background()
	s := &corev1.Secret{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: keeperNS, Name: name}, s); err == nil {
		s.Data = data
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		return
	}
	s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keeperNS, Name: name}, Data: data}
	if err := c.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
}

// series are a gauge vector's series, by the values of labels (in that
// order) joined with "/".
func series(t *testing.T, c prometheus.Collector, labels ...string) map[string]float64 {
	t.Helper()
	out, err := promtext.Collected(c, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func equalSeries(got, want map[string]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			return false
		}
	}
	return true
}

// TestKeeperCertificateMetrics: a runtime CA rotation seen through the
// trust keeper's metrics (docs/certificates.md, "Metrics"): each runtime
// certificate's not-after with the CA that signed it, each CA's not-after,
// the runtimes still on the old CA (counted until re-issued), the runtimes
// whose certificate expires within 7 days, and no series left of a CA or a
// runtime that is gone.
func TestKeeperCertificateMetrics(t *testing.T) {
	const anchor = "keeper-metrics-test"
	// Series of an earlier run (-count): a new keeper knows only its own.
	vsmetrics.RuntimeCertNotAfter.Reset()
	vsmetrics.CANotAfter.DeletePartialMatch(prometheus.Labels{"anchor": anchor})
	ctx := context.Background()
	c := keeperClient(t)
	// CAs valid for a year: a certificate expires when its CA does, if
	// that comes first (trust.Expiry).
	yearCA := func(name string) *pki.CA {
		ca, err := pki.NewCAValid(name, time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0))
		if err != nil {
			t.Fatal(err)
		}
		return ca
	}
	ca1, ca2, stranger := yearCA("ca-1"), yearCA("ca-2"), yearCA("stranger")
	fp1, fp2 := Fingerprint(ca1.Cert), Fingerprint(ca2.Cert)
	caSecret := types.NamespacedName{Namespace: keeperNS, Name: "runtime-watcher-ca"}
	putSecret(t, c, caSecret.Name, map[string][]byte{corev1.TLSCertKey: ca1.PEM})

	now := time.Now()
	later := now.Add(60 * 24 * time.Hour)
	notSoon := now.Add(ExpiringSoon + time.Hour) // just outside the 7 days
	soon := now.Add(ExpiringSoon - time.Hour)    // just inside
	a1 := mustLeaf(t, ca1, "runtime-a", later)
	b1 := mustLeaf(t, ca1, "runtime-b", soon)
	c1 := mustLeaf(t, ca1, "runtime-c", notSoon)
	for id, l := range map[string]*pki.Leaf{"runtime-a": a1, "runtime-b": b1, "runtime-c": c1} {
		putSecret(t, c, certificates.Name(id), map[string][]byte{corev1.TLSCertKey: l.CertPEM})
	}
	// Not a runtime certificate's Secret: not counted.
	putSecret(t, c, "kubeconfig-runtime-a", map[string][]byte{"config": []byte("x")})

	k := &Keeper{
		Runtime: &Anchor{Name: anchor, Client: c, Secret: caSecret,
			Store: types.NamespacedName{Namespace: keeperNS, Name: "keeper-metrics-test-store"}, Log: logr.Discard()},
		Client: c, Log: logr.Discard(),
	}
	k.Init(c, keeperNS)
	unix := func(l *pki.Leaf) float64 { return float64(l.Cert.NotAfter.Unix()) }
	check := func(step string, wantCerts, wantCAs map[string]float64, onOld, expiring float64) {
		t.Helper()
		k.Sync(ctx)
		if got := series(t, vsmetrics.RuntimeCertNotAfter, "runtime", "ca"); !equalSeries(got, wantCerts) {
			t.Errorf("%s: runtime_certificate_not_after_seconds %v, want %v", step, got, wantCerts)
		}
		gotCAs := map[string]float64{}
		for k, v := range series(t, vsmetrics.CANotAfter, "anchor", "ca") {
			if a, ca, _ := strings.Cut(k, "/"); a == anchor {
				gotCAs[ca] = v
			}
		}
		if !equalSeries(gotCAs, wantCAs) {
			t.Errorf("%s: ca_not_after_seconds{anchor=%q} %v, want %v", step, anchor, gotCAs, wantCAs)
		}
		if got := testutil.ToFloat64(vsmetrics.RuntimesOnOldCA); got != onOld {
			t.Errorf("%s: runtimes_on_old_ca %v, want %v", step, got, onOld)
		}
		if got := testutil.ToFloat64(vsmetrics.RuntimesExpiringSoon); got != expiring {
			t.Errorf("%s: runtimes_certificate_expiring_soon %v, want %v", step, got, expiring)
		}
	}
	caUnix := func(ca *pki.CA) float64 { return float64(ca.Cert.NotAfter.Unix()) }

	check("steady on CA 1",
		map[string]float64{"runtime-a/" + fp1: unix(a1), "runtime-b/" + fp1: unix(b1), "runtime-c/" + fp1: unix(c1)},
		map[string]float64{fp1: caUnix(ca1)}, 0, 1)

	// The CA is renewed with a new key: both CAs are held, every runtime
	// is on the old one until its certificate is re-issued.
	putSecret(t, c, caSecret.Name, map[string][]byte{corev1.TLSCertKey: ca2.PEM})
	check("CA 2 published",
		map[string]float64{"runtime-a/" + fp1: unix(a1), "runtime-b/" + fp1: unix(b1), "runtime-c/" + fp1: unix(c1)},
		map[string]float64{fp1: caUnix(ca1), fp2: caUnix(ca2)}, 3, 1)

	a2 := mustLeaf(t, ca2, "runtime-a", later)
	putSecret(t, c, certificates.Name("runtime-a"), map[string][]byte{corev1.TLSCertKey: a2.CertPEM})
	check("runtime-a re-issued by CA 2",
		map[string]float64{"runtime-a/" + fp2: unix(a2), "runtime-b/" + fp1: unix(b1), "runtime-c/" + fp1: unix(c1)},
		map[string]float64{fp1: caUnix(ca1), fp2: caUnix(ca2)}, 2, 1)

	b2, c2 := mustLeaf(t, ca2, "runtime-b", later), mustLeaf(t, ca2, "runtime-c", later)
	putSecret(t, c, certificates.Name("runtime-b"), map[string][]byte{corev1.TLSCertKey: b2.CertPEM})
	putSecret(t, c, certificates.Name("runtime-c"), map[string][]byte{corev1.TLSCertKey: c2.CertPEM})
	// No certificate is signed by CA 1 any more: it leaves the bundle and
	// its not-after series goes with it.
	check("every runtime on CA 2",
		map[string]float64{"runtime-a/" + fp2: unix(a2), "runtime-b/" + fp2: unix(b2), "runtime-c/" + fp2: unix(c2)},
		map[string]float64{fp2: caUnix(ca2)}, 0, 0)

	// A certificate of a CA the keeper does not hold: "unknown", and not
	// on the current CA.
	s1 := mustLeaf(t, stranger, "runtime-c", soon)
	putSecret(t, c, certificates.Name("runtime-c"), map[string][]byte{corev1.TLSCertKey: s1.CertPEM})
	check("runtime-c signed by a CA not held",
		map[string]float64{"runtime-a/" + fp2: unix(a2), "runtime-b/" + fp2: unix(b2), "runtime-c/unknown": unix(s1)},
		map[string]float64{fp2: caUnix(ca2)}, 1, 1)

	// A runtime removed (its Certificate's Secret deleted): its series and
	// its parsed certificate go.
	if err := c.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: keeperNS, Name: certificates.Name("runtime-c")}}); err != nil {
		t.Fatal(err)
	}
	check("runtime-c removed",
		map[string]float64{"runtime-a/" + fp2: unix(a2), "runtime-b/" + fp2: unix(b2)},
		map[string]float64{fp2: caUnix(ca2)}, 0, 0)
	if _, ok := k.leaves.Load(certificates.Name("runtime-c")); ok {
		t.Error("the removed runtime's certificate is still remembered")
	}

	// A CA that ends in 3 days signs a 60-day certificate, as cert-manager
	// does (it does not cap a leaf at its CA's end): the certificate
	// expires soon all the same.
	ca3, err := pki.NewCAValid("ca-3", now.Add(-time.Hour), now.Add(3*24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	fp3 := Fingerprint(ca3.Cert)
	putSecret(t, c, caSecret.Name, map[string][]byte{corev1.TLSCertKey: ca3.PEM})
	a3 := mustLeaf(t, ca3, "runtime-a", later)
	putSecret(t, c, certificates.Name("runtime-a"), map[string][]byte{corev1.TLSCertKey: a3.CertPEM})
	check("runtime-a re-issued by a CA that ends before it",
		map[string]float64{"runtime-a/" + fp3: unix(a3), "runtime-b/" + fp2: unix(b2)},
		map[string]float64{fp2: caUnix(ca2), fp3: caUnix(ca3)}, 1, 1)
}
