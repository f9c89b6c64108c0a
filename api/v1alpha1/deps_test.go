package v1alpha1_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the API light for the module teams that import it
// (docs/architecture.md §4.11): k8s.io/apimachinery and the standard library,
// nothing of controller-runtime or client-go and nothing else of this
// repository.
func TestDependencies(t *testing.T) {
	const pkg = "github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	out, err := exec.Command("go", "list", "-deps", pkg).CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	var sawPkg, sawApimachinery bool
	for _, p := range deps {
		switch {
		case p == pkg:
			sawPkg = true
		case strings.HasPrefix(p, "sigs.k8s.io/controller-runtime"),
			strings.HasPrefix(p, "k8s.io/client-go"),
			strings.HasPrefix(p, "github.com/seed-c8be168e/runtime-watcher/"):
			t.Errorf("api/v1alpha1 depends on %s", p)
		case p == "k8s.io/apimachinery/pkg/runtime":
			sawApimachinery = true
		}
	}
	if !sawPkg || !sawApimachinery {
		t.Fatalf("go list output lacks %s or k8s.io/apimachinery/pkg/runtime: the check is not looking at the API:\n%s", pkg, out)
	}
}
