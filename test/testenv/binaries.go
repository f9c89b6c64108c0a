package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
)

// Binaries are the repository's main packages, in the folder names
// BuildBinary takes: the four components and the two examples.
var Binaries = []string{"ext-authz", "vs-controller", "skr-webhook", "listener/example", "module-sync", "module-sync/example"}

var built sync.Map // name → *buildResult

type buildResult struct {
	once sync.Once
	path string
	err  error
}

// BuildBinary builds the main package in the repository folder name (e.g.
// "ext-authz", "listener/example") into bin/<name with "/" as "-"> (so that
// listener/example and module-sync/example do not collide) and returns its
// path.
// A folder with a go.mod of its own (a test/tools module, e.g.
// "test/tools/kymalistener") is built as its module's main package, in
// that module.
// It is built with GOFIPS140=fipsmode.Module, as the Makefile and the
// Dockerfile build it: what the tests run is what ships.
// Each binary is built once per test process; Go's build cache makes repeated
// builds across processes cheap. The binary is renamed into place, so test
// processes building the same binary at once never see a partial file.
//
// In a test under -short (make test-unit) it builds nothing and fails: the
// inner loop builds no binaries, so a test that runs one calls SkipIfShort
// first.
func BuildBinary(name string) (string, error) {
	if testing.Testing() && testing.Short() {
		return "", fmt.Errorf("testenv.BuildBinary(%q) under -short: make test-unit builds no binaries; call SkipIfShort before", name)
	}
	v, _ := built.LoadOrStore(name, &buildResult{})
	r := v.(*buildResult)
	r.once.Do(func() {
		root := RepoRoot()
		binDir := filepath.Join(root, "bin")
		if r.err = os.MkdirAll(binDir, 0o755); r.err != nil {
			return
		}
		tmp, err := os.CreateTemp(binDir, ".build-*")
		if err != nil {
			r.err = err
			return
		}
		_ = tmp.Close()
		cmd := exec.Command("go", "build", "-o", tmp.Name(), "./"+name)
		cmd.Dir = root
		if _, err := os.Stat(filepath.Join(root, name, "go.mod")); err == nil {
			cmd = exec.Command("go", "build", "-o", tmp.Name(), ".")
			cmd.Dir = filepath.Join(root, name)
		}
		cmd.Env = append(os.Environ(), "GOFIPS140="+fipsmode.Module)
		if out, err := cmd.CombinedOutput(); err != nil {
			_ = os.Remove(tmp.Name())
			r.err = fmt.Errorf("go build ./%s: %w\n%s", name, err, out)
			return
		}
		r.path = filepath.Join(binDir, strings.ReplaceAll(name, "/", "-"))
		r.err = os.Rename(tmp.Name(), r.path)
	})
	return r.path, r.err
}
