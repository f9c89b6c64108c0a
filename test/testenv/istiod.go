package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// IstioModule is the module whose version test/tools/istio/go.mod pins; its
// pilot-discovery is the istiod the local environment runs.
const IstioModule = "istio.io/istio"

// IstioVersion is the istio.io/istio version test/tools/istio/go.mod pins.
func IstioVersion() (string, error) {
	path := filepath.Join(RepoRoot(), "test", "tools", "istio", "go.mod")
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == IstioModule {
				return fields[i+1], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s does not require %s", path, IstioModule)
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
