package fakecluster

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// lmFieldManager is Lifecycle Manager's field manager
// (vs-controller/takeover.LMFieldManager; not imported: the take-over's
// own tests use this package).
const lmFieldManager = "lifecycle-manager"

// LifecycleManagerBundle applies Lifecycle Manager's SKR bundle
// (test/fixtures/lifecycle-manager/skr-bundle, its ten objects) into skr
// as LM does: server-side apply, forced, field manager lifecycle-manager.
func LifecycleManagerBundle(tb testing.TB, skr client.Client) {
	tb.Helper()
	_, self, _, _ := runtime.Caller(0)
	files, err := filepath.Glob(filepath.Join(filepath.Dir(self), "..", "fixtures", "lifecycle-manager", "skr-bundle", "*-rendered.yaml"))
	if err != nil || len(files) != 10 {
		tb.Fatalf("fakecluster: LM's fixtures: %v, %d files", err, len(files))
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(data, &u.Object); err != nil {
			tb.Fatal(f, err)
		}
		if k := u.GetKind(); k == "ValidatingWebhookConfiguration" || k == "PriorityClass" {
			u.SetNamespace("")
		}
		if err := skr.Apply(context.Background(), client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(lmFieldManager), client.ForceOwnership); err != nil {
			tb.Fatal(f, err)
		}
	}
}
