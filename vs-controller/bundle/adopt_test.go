package bundle_test

import (
	"os"
	"path/filepath"
	"sort"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

// LifecycleManagerObjects names exactly the objects of LM's SKR bundle
// (test/fixtures/lifecycle-manager/skr-bundle), and each is LM's.
func TestLifecycleManagerObjectsAreTheFixtures(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "..", "test", "fixtures", "lifecycle-manager", "skr-bundle", "*-rendered.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v, %d files", err, len(files))
	}
	var fixtures []string
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var obj struct {
			Kind     string            `json:"kind"`
			Metadata metav1.ObjectMeta `json:"metadata"`
		}
		if err := yaml.Unmarshal(data, &obj); err != nil {
			t.Fatal(f, err)
		}
		if !bundle.IsLifecycleManagers(&obj.Metadata) {
			t.Errorf("%s: not recognised as Lifecycle Manager's", f)
		}
		ns := obj.Metadata.Namespace
		if obj.Kind == "ValidatingWebhookConfiguration" || obj.Kind == "PriorityClass" {
			ns = "" // cluster-scoped
		}
		fixtures = append(fixtures, obj.Kind+" "+ns+"/"+obj.Metadata.Name)
	}
	var ours []string
	for _, r := range bundle.LifecycleManagerObjects(bundle.Options{}) {
		ours = append(ours, r.GVK.Kind+" "+r.Key.Namespace+"/"+r.Key.Name)
	}
	sort.Strings(fixtures)
	sort.Strings(ours)
	if len(ours) != len(fixtures) {
		t.Fatalf("LifecycleManagerObjects %v, fixtures %v", ours, fixtures)
	}
	for i := range ours {
		if ours[i] != fixtures[i] {
			t.Errorf("LifecycleManagerObjects %v, fixtures %v", ours, fixtures)
			break
		}
	}
}

func TestIsLifecycleManagers(t *testing.T) {
	lm := map[string]string{bundle.LMManagedByLabel: bundle.LMManagedByValue}
	for _, c := range []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		want        bool
	}{
		{"LM's label", lm, nil, true},
		{"LM's label and our hash: taken over", lm, map[string]string{diffapply.HashAnnotation: "x"}, false},
		{"other managed-by value", map[string]string{bundle.LMManagedByLabel: "lifecycle-manager"}, nil, false},
		{"no labels", nil, nil, false},
	} {
		m := &metav1.ObjectMeta{Labels: c.labels, Annotations: c.annotations}
		if got := bundle.IsLifecycleManagers(m); got != c.want {
			t.Errorf("%s: %t, want %t", c.name, got, c.want)
		}
	}
}

func TestTakeoverDeployment(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns"}
	d, err := bundle.TakeoverDeployment(o)
	if err != nil {
		t.Fatal(err)
	}
	ours, err := bundle.Deployment(o)
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != bundle.TakeoverName || d.Namespace != "skr-ns" {
		t.Errorf("name %s/%s", d.Namespace, d.Name)
	}
	sel, _ := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	oursSel, _ := metav1.LabelSelectorAsSelector(ours.Spec.Selector)
	if !sel.Matches(labels.Set(d.Spec.Template.Labels)) || !oursSel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Errorf("take-over pods %v: selected by it %t, by our Service/Deployment selector %t",
			d.Spec.Template.Labels, sel.Matches(labels.Set(d.Spec.Template.Labels)), oursSel.Matches(labels.Set(d.Spec.Template.Labels)))
	}
	if sel.Matches(labels.Set(ours.Spec.Template.Labels)) {
		t.Error("the take-over selector must not select our skr-webhook pods")
	}
	mounted := ""
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			mounted = v.Secret.SecretName
		}
	}
	if mounted != bundle.TakeoverSecretName {
		t.Errorf("mounts Secret %q", mounted)
	}
	if ours.Spec.Template.Spec.Volumes[0].Secret.SecretName != bundle.SecretName {
		t.Error("TakeoverDeployment changed the shared template")
	}
	if s := bundle.TakeoverSecret(o, certificates.TLS{CA: []byte("ca")}); s.Name != bundle.TakeoverSecretName || s.Type != "kubernetes.io/tls" {
		t.Errorf("TakeoverSecret %s %s", s.Name, s.Type)
	}
}
