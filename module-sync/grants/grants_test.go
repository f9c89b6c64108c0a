package grants_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
)

// TestEveryBundleObjectRefused: the names module-sync refuses are the
// bundle's own list (manifests/skr), and every object vs-controller
// renders into a runtime — the bundle, the take-over objects and Lifecycle
// Manager's objects it adopts or removes — is refused to a module whose
// grant names every kind of it in the bundle's namespace (issue 33: a
// module granted ConfigMaps in kyma-system with adopt rewrote
// skr-webhook-managers).
func TestEveryBundleObjectRefused(t *testing.T) {
	o := bundle.Options{}
	w := v1beta2.Watcher{}
	w.Namespace, w.Name = "kcp-system", "w"
	w.Spec.Manager = "m"
	w.Spec.ResourceToWatch = v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "v1beta2", Resource: "kymas"}
	watchers := []v1beta2.Watcher{w}
	var c bundle.WebhookConfigurations
	vwc, err := c.Desired(o, watchers, []byte("ca"))
	if err != nil {
		t.Fatal(err)
	}
	objs, err := bundle.Desired(o, certificates.TLS{CA: []byte("ca"), Cert: []byte("crt"), Key: []byte("key")}, watchers, vwc)
	if err != nil {
		t.Fatal(err)
	}
	type ref struct{ group, kind, ns, name string }
	var refs []ref
	for _, u := range objs {
		if u.GetKind() == "Namespace" {
			continue // the namespace itself: a cluster-scoped kind only a fully trusted module is granted
		}
		gvk := u.GroupVersionKind()
		refs = append(refs, ref{gvk.Group, gvk.Kind, u.GetNamespace(), u.GetName()})
	}
	for _, r := range append(bundle.LifecycleManagerObjects(o), bundle.TakeoverRemoval(o)...) {
		refs = append(refs, ref{r.GVK.Group, r.GVK.Kind, r.Key.Namespace, r.Key.Name})
	}
	if len(refs) < 15 {
		t.Fatalf("only %d objects enumerated: %v", len(refs), refs)
	}
	var spec v1alpha1.ModuleGrantSpec
	spec.Namespaces = []string{bundle.DefaultNamespace}
	for _, r := range refs {
		k := v1alpha1.GrantedKind{Group: r.group, Kind: r.kind}
		if r.kind == "Secret" {
			continue // refused as a Secret anyway; checked by name below too
		}
		if r.ns == "" {
			spec.ClusterScopedKinds = append(spec.ClusterScopedKinds, k)
		} else {
			spec.Kinds = append(spec.Kinds, k)
		}
	}
	g := grants.From("kcp-system", "greedy", &v1alpha1.ModuleGrant{Spec: spec})
	for _, r := range refs {
		if !slices.Contains(skr.ObjectNames(), r.name) {
			t.Errorf("%s %s/%s is not in manifests/skr's list of bundle names", r.kind, r.ns, r.name)
		}
		if !grants.IsBundleName(r.name) {
			t.Errorf("%s %s/%s: not a bundle name for module-sync", r.kind, r.ns, r.name)
		}
		gvk := v1beta2.GroupVersion.WithKind(r.kind) // version does not matter for the check
		gvk.Group = r.group
		err := g.Check(gvk, r.ns != "", r.ns, r.name)
		if err == nil || (r.kind != "Secret" && !strings.Contains(err.Error(), "watcher's bundle")) {
			t.Errorf("%s %s/%s: %v, want refused as the watcher's bundle", r.kind, r.ns, r.name, err)
		}
	}
	// A name of the list that the bundle does not render today is refused
	// all the same, and so is anything under the reserved prefix.
	for _, name := range append(skr.ObjectNames(), skr.ReservedPrefix+"module-workloads") {
		gvk := v1beta2.GroupVersion.WithKind("ConfigMap")
		gvk.Group = ""
		if err := g.Check(gvk, true, bundle.DefaultNamespace, name); err == nil {
			t.Errorf("ConfigMap %s: allowed", name)
		}
	}
}
