package testenv_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// GoControlPlaneEnvoy is the Envoy API module the project compiles its
// ext_authz server and tests against.
const goControlPlaneEnvoy = "github.com/envoyproxy/go-control-plane/envoy"

// maxEnvoyAheadOfIstio is how many minors the Envoy the gateway runs may be
// ahead of the Envoy API the pinned istiod generates config with. Istio
// releases support the Envoy of their own proxy build, which is built from
// Envoy's main branch of the same months; istiod's generated config uses
// only fields of its go-control-plane, which a newer Envoy accepts as long
// as nothing it uses is removed — Envoy keeps a deprecated field at least
// one minor with a warning and removes it after about three (its
// breaking-change policy). So: the Envoy pin is never older than istiod's
// go-control-plane (istiod could name fields the binary lacks) and at most
// three minors newer.
const maxEnvoyAheadOfIstio = 3

// The three versions of Envoy in the project agree: the binary the gateway
// runs (Makefile ENVOY_VERSION = testenv.EnvoyVersion), the Envoy API the
// project's own code compiles against (go.mod's go-control-plane/envoy:
// same minor) and the Envoy API of the pinned istiod (test/tools/istio's
// go-control-plane/envoy: the pin is not older, and at most
// maxEnvoyAheadOfIstio minors newer).
func TestEnvoyVersionsAgree(t *testing.T) {
	mk, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^ENVOY_VERSION\s*\?=\s*(\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile sets no ENVOY_VERSION")
	}
	if string(m[1]) != testenv.EnvoyVersion {
		t.Errorf("Makefile ENVOY_VERSION %s, testenv.EnvoyVersion %s: set both", m[1], testenv.EnvoyVersion)
	}
	pin, err := testenv.MinorOf(testenv.EnvoyVersion)
	if err != nil {
		t.Fatal(err)
	}

	own, err := testenv.GoModRequire("go.mod", goControlPlaneEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	ownMinor, err := testenv.MinorOf(own)
	if err != nil {
		t.Fatal(err)
	}
	if ownMinor != pin {
		t.Errorf("go.mod requires %s %s, the gateway runs Envoy %s: the Envoy API the project compiles against must be the Envoy it runs (same minor)",
			goControlPlaneEnvoy, own, testenv.EnvoyVersion)
	}

	istio, err := testenv.GoModRequire("test/tools/istio/go.mod", goControlPlaneEnvoy)
	if err != nil {
		t.Fatal(err)
	}
	istioMinor, err := testenv.MinorOf(istio)
	if err != nil {
		t.Fatal(err)
	}
	if pin < istioMinor || pin > istioMinor+maxEnvoyAheadOfIstio {
		t.Errorf("the pinned istiod generates config with %s %s (1.%d), the gateway runs Envoy %s: want Envoy 1.%d to 1.%d",
			goControlPlaneEnvoy, istio, istioMinor, testenv.EnvoyVersion, istioMinor, istioMinor+maxEnvoyAheadOfIstio)
	}
	t.Logf("Envoy %s; go.mod %s; istiod's %s", testenv.EnvoyVersion, own, istio)
}

func TestMinorOf(t *testing.T) {
	for v, want := range map[string]int{"1.40.0": 40, "v1.35.0": 35, "v1.37.1-0.20260713214202-ca8ce173c36f": 37} {
		if got, err := testenv.MinorOf(v); err != nil || got != want {
			t.Errorf("MinorOf(%s) = %d, %v; want %d", v, got, err, want)
		}
	}
	if _, err := testenv.MinorOf("2.0.0"); err == nil {
		t.Error("MinorOf(2.0.0): want an error")
	}
}
