package main

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestLeanDependencies keeps controller-runtime's client and cache and
// client-go's typed clients (with every k8s.io/api group) out of ext-authz:
// their package initialization alone costs about 15 MiB of resident memory
// (ext-authz/README.md, Memory). Pinning comes from identity/pinning, the
// Kyma CRs from identity/kymastore.
func TestLeanDependencies(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, "github.com/seed-c8be168e/runtime-watcher/identity/kymastore") {
		t.Fatalf("go list output lacks ext-authz's own imports\n%s", out)
	}
	forbidden := []string{
		"sigs.k8s.io/controller-runtime/pkg/client", "sigs.k8s.io/controller-runtime/pkg/cache",
		"sigs.k8s.io/controller-runtime/pkg/metrics", "k8s.io/client-go/kubernetes", "k8s.io/client-go/discovery",
		"k8s.io/api/", "github.com/seed-c8be168e/runtime-watcher/identity\n",
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if p == strings.TrimSuffix(f, "\n") || !strings.HasSuffix(f, "\n") && strings.HasPrefix(p, f) {
				t.Errorf("ext-authz depends on %s", p)
			}
		}
	}
}
