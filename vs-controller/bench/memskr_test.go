package bench_test

import (
	"context"
	goruntime "runtime"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/memskr"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
)

// ensure does what vs-controller's bundle pass does for one object without
// an apply memo (a restarted controller): read the metadata, then the whole
// object, compare, apply when it differs. It reports whether it wrote.
func ensure(ctx context.Context, skr client.Client, desired *unstructured.Unstructured) (bool, error) {
	key := client.ObjectKeyFromObject(desired)
	var live client.Object
	meta := &metav1.PartialObjectMetadata{}
	meta.SetGroupVersionKind(desired.GroupVersionKind())
	switch err := skr.Get(ctx, key, meta); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return false, err
	default:
		full := &unstructured.Unstructured{}
		full.SetGroupVersionKind(desired.GroupVersionKind())
		if err := skr.Get(ctx, key, full); err != nil {
			return false, err
		}
		live = full
	}
	return diffapply.Ensure(ctx, skr, runtimes.FieldOwner, desired, live)
}

// TestMemorySKRHoldsTheBundle: the memory stand-in keeps vs-controller's
// bundle (100 Watchers' webhook configuration, a certificate per runtime) so
// that a second pass finds every object up to date, and what one runtime
// costs in memory.
func TestMemorySKRHoldsTheBundle(t *testing.T) {
	n := 1000
	if testing.Short() {
		n = 100
	}
	ctx := t.Context()
	ca, err := pki.NewCA("memskr test CA")
	if err != nil {
		t.Fatal(err)
	}
	var ws []v1beta2.Watcher
	for i := range 100 {
		ws = append(ws, *benchWatcher(i))
	}
	vwc, err := diffapply.Desired(bundle.WebhookConfiguration(bundle.Options{}, ws, ca.PEM),
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
	if err != nil {
		t.Fatal(err)
	}
	bundles := make([][]*unstructured.Unstructured, n)
	for i := range n {
		leaf, err := ca.Issue(pki.LeafOptions{CommonName: runtimeID(i)})
		if err != nil {
			t.Fatal(err)
		}
		if bundles[i], err = bundle.Desired(bundle.Options{KCPAddr: "gateway.kcp.example.com"},
			certificates.TLS{CA: ca.PEM, Cert: leaf.CertPEM, Key: leaf.KeyPEM}, ws, vwc); err != nil {
			t.Fatal(err)
		}
	}

	h0 := heapInuse()
	fleet := memskr.NewFleet(bundle.Scheme(), skrclient.NewRESTMapper(bundle.Kinds()))
	for pass, wantWrites := range []int{len(bundles[0]) * n, 0} {
		writes := 0
		for i := range n {
			skr := fleet.Cluster(kymaNS + "/" + runtimeID(i))
			for _, obj := range bundles[i] {
				wrote, err := ensure(ctx, skr, obj)
				if err != nil {
					t.Fatalf("pass %d, %s, %s %s: %v", pass+1, runtimeID(i), obj.GetKind(), obj.GetName(), err)
				}
				if wrote {
					writes++
				}
			}
		}
		if writes != wantWrites {
			t.Errorf("pass %d wrote %d objects, want %d", pass+1, writes, wantWrites)
		}
	}
	perRuntime := (float64(heapInuse()) - float64(h0)) / float64(n) / 1024
	goruntime.KeepAlive(fleet)
	goruntime.KeepAlive(bundles)
	t.Logf("%d runtimes of %d objects each: %.1f KiB heap per runtime, %d distinct bodies", n, 7, perRuntime, fleet.Bodies())
	// The stand-in must stay cheap: 10,000 runtimes in well under 1 GiB.
	if perRuntime > 64 {
		t.Errorf("%.1f KiB per runtime; want at most 64", perRuntime)
	}
}
