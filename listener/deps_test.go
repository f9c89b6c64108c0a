package listener_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDependencies keeps the listener light for the operators that import
// it (docs/architecture.md §1): nothing of Istio, Envoy, cert-manager or gRPC,
// of this repository only the contract, the API types and the shared
// identity code, and nothing of ext-authz (the listener must not depend on
// another component: go list -deps ./listener/... holds no ext-authz package).
//
// gRPC: controller-runtime v0.22 does not bring google.golang.org/grpc into
// a package that uses its manager, metrics, certwatcher, event, handler and
// source packages, so no allowlist entry is needed; if a future version
// does, the test fails and the allowlist must name exactly the packages it
// brings.
func TestDependencies(t *testing.T) {
	const module = "github.com/seed-c8be168e/runtime-watcher"
	out, err := exec.Command("go", "list", "-deps", module+"/listener/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	forbidden := []string{"istio.io/", "github.com/envoyproxy/", "github.com/cert-manager/", "google.golang.org/grpc"}
	ownAllowed := map[string]bool{
		module + "/listener":                   true,
		module + "/listener/example":           true,
		module + "/listener/example/eventline": true,
		module + "/listener/integration":       true, // tests only
		module + "/api/contract":               true,
		module + "/identity":                   true,
		module + "/identity/xfcc":              true,
		// Verifying ext-authz's identity signature (WithIdentityKeyFile).
		module + "/identity/assertion": true,
		// The Watcher API types (Kyma's GVK), imported by identity; API types
		// are kept light like the listener (docs/architecture.md §1) and their
		// own dependencies pass through the same forbidden-prefix check.
		module + "/api/v1beta2": true,
		// SAN pinning without client-go (identity re-exports it).
		module + "/identity/pinning": true,
		// Reloading the TLS and CA files (fsnotify, logr and the
		// standard library).
		module + "/filewatch": true,
		// --version of the example operator: standard library only.
		module + "/version": true,
		// How the example operator starts (startup.Main: flags, zap
		// logging, the soft memory limit, signals), like every binary;
		// controller-runtime's log and signals packages and the standard
		// library only.
		module + "/startup":  true,
		module + "/memlimit": true,
		// The example operator's FIPS 140-3 metric: Prometheus and
		// crypto/fips140 only.
		module + "/fipsmode": true,
	}
	deps := strings.Fields(string(out))
	if len(deps) < 50 {
		t.Fatalf("go list returned only %d packages: %s", len(deps), out)
	}
	for _, p := range deps {
		for _, f := range forbidden {
			if strings.HasPrefix(p, f) {
				t.Errorf("listener depends on %s", p)
			}
		}
		if strings.HasPrefix(p, module+"/ext-authz") {
			t.Errorf("listener depends on ext-authz: %s", p)
		}
		if strings.HasPrefix(p, module+"/") && !ownAllowed[p] || p == module {
			t.Errorf("listener depends on %s of this repository", p)
		}
	}
	for _, want := range []string{"sigs.k8s.io/controller-runtime/pkg/event", module + "/api/contract", module + "/identity"} {
		if !contains(deps, want) {
			t.Errorf("go list output lacks %s: the check is not looking at the listener", want)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
