package identity_test

import (
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// TestDependencies keeps identity light, as the listener's operators import
// it: the standard library, k8s.io/apimachinery, client-go,
// controller-runtime, and of this repository only the contract and the API
// types; nothing of Istio, Envoy, cert-manager or gRPC, and no component.
func TestDependencies(t *testing.T) {
	const module = "github.com/seed-c8be168e/runtime-watcher"
	out, err := exec.Command("go", "list", "-deps", module+"/identity/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"istio.io/", "github.com/envoyproxy/", "github.com/cert-manager/", "google.golang.org/grpc"}
	ownAllowed := map[string]bool{
		module + "/identity":           true,
		module + "/identity/xfcc":      true,
		module + "/identity/pinning":   true,
		module + "/identity/kymastore": true,
		// The identity assertion's key files are reloaded (fsnotify,
		// logr and the standard library).
		module + "/identity/assertion": true,
		module + "/filewatch":          true,
		module + "/api/contract":       true,
		module + "/api/v1beta2":        true,
	}
	deps := strings.Fields(string(out))
	if !slices.Contains(deps, module+"/identity/xfcc") || !slices.Contains(deps, "sigs.k8s.io/controller-runtime/pkg/client") {
		t.Fatalf("go list output lacks identity's own imports: the check is not looking at identity\n%s", out)
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("identity depends on %s", p)
			}
		}
		if strings.HasPrefix(p, module+"/") && !ownAllowed[p] || p == module {
			t.Errorf("identity depends on %s of this repository", p)
		}
	}
}
