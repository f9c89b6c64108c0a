package bundle_test

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

func TestDesired(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns"}
	var c bundle.WebhookConfigurations
	watchers := []v1beta2.Watcher{watcher("kcp-system", "w1", "m1", v1beta2.SpecField, nil)}
	vwc, err := c.Desired(o, watchers, []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := bundle.Desired(o, certificates.TLS{CA: []byte("ca"), Cert: []byte("crt"), Key: []byte("key")}, watchers, vwc)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ kind, ns, name string }{
		{"Namespace", "", "skr-ns"}, {"Secret", "skr-ns", bundle.SecretName},
		{"ConfigMap", "skr-ns", bundle.ManagersConfigMapName}, {"NetworkPolicy", "skr-ns", bundle.NetworkPolicyName},
		{"Service", "skr-ns", bundle.Name},
		{"Deployment", "skr-ns", bundle.Name}, {"PodDisruptionBudget", "skr-ns", bundle.Name},
		{"ValidatingWebhookConfiguration", "", bundle.Name},
	}
	if len(objs) != len(want) {
		t.Fatalf("%d objects, want %d", len(objs), len(want))
	}
	kinds := bundle.Kinds()
	for i, w := range want {
		u := objs[i]
		if u.GetKind() != w.kind || u.GetNamespace() != w.ns || u.GetName() != w.name {
			t.Errorf("object %d: %s %s/%s, want %s %s/%s", i, u.GetKind(), u.GetNamespace(), u.GetName(), w.kind, w.ns, w.name)
		}
		if u.GetAnnotations()[diffapply.HashAnnotation] == "" {
			t.Errorf("%s lacks the hash annotation", u.GetKind())
		}
		clusterScoped, known := kinds[u.GroupVersionKind()]
		if !known || clusterScoped != (w.ns == "") {
			t.Errorf("Kinds() has %s as known=%t cluster-scoped=%t", u.GetKind(), known, clusterScoped)
		}
		if !bundle.Scheme().Recognizes(u.GroupVersionKind()) {
			t.Errorf("Scheme() lacks %s", u.GetKind())
		}
	}
	if len(kinds) != len(want)+1 { // + Lifecycle Manager's PriorityClass (adopt.go)
		t.Errorf("Kinds() has %d kinds, the bundle %d", len(kinds), len(want))
	}
}

func TestRemoval(t *testing.T) {
	refs := bundle.Removal(bundle.Options{})
	want := []string{"ValidatingWebhookConfiguration//skr-webhook", "Deployment/kyma-system/skr-webhook",
		"PodDisruptionBudget/kyma-system/skr-webhook", "NetworkPolicy/kyma-system/skr-webhook", "Service/kyma-system/skr-webhook",
		"ConfigMap/kyma-system/skr-webhook-managers", "Secret/kyma-system/skr-webhook-tls"}
	if len(refs) != len(want) {
		t.Fatalf("%v", refs)
	}
	for i, r := range refs {
		if got := r.GVK.Kind + "/" + r.Key.Namespace + "/" + r.Key.Name; got != want[i] {
			t.Errorf("ref %d: %s, want %s", i, got, want[i])
		}
	}
}

func TestWebhookConfigurationsCache(t *testing.T) {
	o := bundle.Options{}
	var c bundle.WebhookConfigurations
	w1 := watcher("kcp-system", "w1", "m1", v1beta2.SpecField, nil)
	w2 := watcher("kcp-system", "w2", "m2", v1beta2.SpecField, nil)
	a, _ := c.Desired(o, []v1beta2.Watcher{w1, w2}, []byte("ca"))
	b, _ := c.Desired(o, []v1beta2.Watcher{w2, w1}, []byte("ca"))
	if a != b {
		t.Fatal("the same Watchers in another order built a new configuration")
	}
	if d, _ := c.Desired(o, []v1beta2.Watcher{w1, w2}, []byte("other ca")); d == a {
		t.Fatal("another CA reused the configuration")
	}
	w2.Generation, w2.UID = 2, types.UID("u2")
	if d, _ := c.Desired(o, []v1beta2.Watcher{w1, w2}, []byte("ca")); d == a {
		t.Fatal("a changed Watcher reused the configuration")
	}
}

func TestBundlesCache(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns"}
	var vwcs bundle.WebhookConfigurations
	var c bundle.Bundles
	w1 := watcher("kcp-system", "w1", "m1", v1beta2.SpecField, nil)
	w2 := watcher("kcp-system", "w2", "m2", v1beta2.SpecField, nil)
	watchers := []v1beta2.Watcher{w1, w2}
	vwc, err := vwcs.Desired(o, watchers, []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	// Every call, cached or not, is what Desired builds for that runtime.
	for _, tls := range []certificates.TLS{
		{CA: []byte("ca"), Cert: []byte("crt-1"), Key: []byte("key-1")},
		{CA: []byte("ca"), Cert: []byte("crt-2"), Key: []byte("key-2")},
	} {
		got, err := c.Desired(o, tls, watchers, vwc)
		if err != nil {
			t.Fatal(err)
		}
		want, err := bundle.Desired(o, tls, watchers, vwc)
		if err != nil {
			t.Fatal(err)
		}
		if !equality.Semantic.DeepEqual(got, want) {
			t.Fatalf("cached bundle of %s differs from Desired's", tls.Cert)
		}
	}
	// A changed Watcher (here: dropped) changes the managers ConfigMap.
	got, err := c.Desired(o, certificates.TLS{CA: []byte("ca")}, []v1beta2.Watcher{w1}, vwc)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := bundle.Desired(o, certificates.TLS{CA: []byte("ca")}, []v1beta2.Watcher{w1}, vwc)
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatal("a changed set of Watchers reused the shared objects")
	}
}

// BenchmarkDesired: one runtime pass's bundle with 100 Watchers, built
// whole (bundle.Desired) and with the shared objects cached (Bundles).
func BenchmarkDesired(b *testing.B) {
	o := bundle.Options{KCPAddr: "gateway.kcp.example.com"}
	var watchers []v1beta2.Watcher
	for i := range 100 {
		watchers = append(watchers, watcher("kcp-system", fmt.Sprintf("w%d", i), fmt.Sprintf("m%d", i), v1beta2.SpecField, nil))
	}
	var vwcs bundle.WebhookConfigurations
	vwc, err := vwcs.Desired(o, watchers, []byte("ca"))
	if err != nil {
		b.Fatal(err)
	}
	tls := certificates.TLS{CA: []byte("ca"), Cert: []byte("crt"), Key: []byte("key")}
	b.Run("uncached", func(b *testing.B) {
		for b.Loop() {
			if _, err := bundle.Desired(o, tls, watchers, vwc); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Bundles", func(b *testing.B) {
		var c bundle.Bundles
		for b.Loop() {
			if _, err := c.Desired(o, tls, watchers, vwc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
