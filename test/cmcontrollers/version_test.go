package cmcontrollers_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const cmModule = "github.com/cert-manager/cert-manager"

// The version policy (docs/deploying.md): the cert-manager CRDs the
// manifests ship (manifests/crds/third_party, copied by `make manifests`)
// are those of the cert-manager whose controllers the tests run — the
// version go.mod requires, which this package compiles in (and
// test/kind/versions.env installs on kind, manifests/consistency_test.go) —
// and docs/deploying.md names that version.
func TestCRDsAreThoseOfTheControllersRun(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", cmModule).Output()
	if err != nil {
		t.Fatalf("go list -m %s: %v", cmModule, err)
	}
	version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
	shipped, err := filepath.Glob(filepath.Join(testenv.RepoRoot(), "manifests", "crds", "third_party", "cert-manager.io_*.yaml"))
	if err != nil || len(shipped) == 0 {
		t.Fatalf("no cert-manager CRDs in manifests/crds/third_party (%v)", err)
	}
	for _, f := range shipped {
		got, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(dir, "deploy", "crds", filepath.Base(f)))
		if err != nil {
			t.Errorf("%s: not a CRD of cert-manager %s: %v", filepath.Base(f), version, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from cert-manager %s's deploy/crds: run `make manifests`", filepath.Base(f), version)
		}
	}
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "deploying.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(doc, []byte("cert-manager "+version)) {
		t.Errorf("docs/deploying.md does not name cert-manager %s, the version the manifests are tested with", version)
	}
}
