package testenv

import (
	"fmt"
	"os"
	"path/filepath"
)

// IstioModule is the module whose version test/tools/istio/go.mod pins; its
// pilot-discovery is the istiod the local environment runs.
const IstioModule = "istio.io/istio"

// IstioVersion is the istio.io/istio version test/tools/istio/go.mod pins.
func IstioVersion() (string, error) {
	return GoModRequire(filepath.Join("test", "tools", "istio", "go.mod"), IstioModule)
}

// IstiodBinary is the path of pilot-discovery that `make istio-assets`
// (part of `make envtest-assets`) builds: bin/istio/<version>/pilot-discovery.
// It fails with an instruction when it is not there.
func IstiodBinary() (string, error) {
	v, err := IstioVersion()
	if err != nil {
		return "", err
	}
	path := filepath.Join(RepoRoot(), "bin", "istio", v, "pilot-discovery")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("istiod (pilot-discovery) %s not found at %s: run `make envtest-assets` to build it from source", v, path)
	}
	return path, nil
}
