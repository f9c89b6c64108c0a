package bundle_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/apply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

func TestDesired(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns"}
	var c bundle.WebhookConfigurations
	watchers := []v1beta2.Watcher{watcher("kcp-system", "w1", "m1", v1beta2.SpecField, nil)}
	vwc, err := c.Desired(o, watchers, []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := bundle.Desired(o, bundle.TLS{CA: []byte("ca"), Cert: []byte("crt"), Key: []byte("key")}, watchers, vwc)
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
		if u.GetAnnotations()[apply.HashAnnotation] == "" {
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
