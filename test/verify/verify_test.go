package verify

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The generated files the cases make stale.
const (
	crdFile  = "manifests/crds/operator.kyma-project.io_watchers.yaml"
	rbacFile = "manifests/kcp/rbac/role.yaml"
)

func TestVerifyFailsOnAStaleCRD(t *testing.T) {
	// A kubebuilder marker changed without `make manifests`.
	out := verifyAfter(t, "api/v1beta2/watcher_types.go",
		"// +kubebuilder:validation:Enum=spec;status\n", "// +kubebuilder:validation:Enum=spec;status;metadata\n")
	expectStale(t, out, crdFile, "metadata", rbacFile)
}

func TestVerifyFailsOnStaleRBAC(t *testing.T) {
	// role.yaml as it was before `make manifests` caught up with the
	// markers: without the rule for kymas/finalizers.
	out := verifyAfter(t, rbacFile,
		"- apiGroups:\n  - operator.kyma-project.io\n  resources:\n  - kymas/finalizers\n  verbs:\n  - update\n", "")
	expectStale(t, out, rbacFile, "kymas/finalizers", crdFile)
}

// verifyAfter clones the repository's HEAD into a temporary folder, replaces
// old by repl in file there, runs `make verify-generated` (controller-gen is
// built once, into this repository's bin/), and returns its output; it
// fails the test when the check passes.
func verifyAfter(t *testing.T, file, old, repl string) string {
	t.Helper()
	if testing.Short() {
		t.Skip("clones the repository and runs make verify-generated (minutes): skipped by -short (make test-unit); make test runs it")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	clone := filepath.Join(t.TempDir(), "repo")
	run(t, root, "git", "clone", "--quiet", root, clone)

	path := filepath.Join(clone, file)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s does not contain %q; update this test", file, old)
	}
	if err := os.WriteFile(path, []byte(strings.Replace(string(b), old, repl, 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("make", "--no-print-directory", "verify-generated", "BIN="+filepath.Join(root, "bin"))
	cmd.Dir = clone
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("make verify-generated passed with a stale %s; output:\n%s", file, out)
	}
	if _, ok := err.(*exec.ExitError); !ok {
		t.Fatalf("make verify-generated: %v\n%s", err, out)
	}
	return string(out)
}

// expectStale checks that the output shows the diff of the stale file (its
// name and a changed line) and nothing about the other generated file.
func expectStale(t *testing.T, out, file, changed, untouched string) {
	t.Helper()
	if !strings.Contains(out, "+++ "+file) || !strings.Contains(out, changed) {
		t.Errorf("output lacks the diff of %s (%q); output:\n%s", file, changed, out)
	}
	if strings.Contains(out, untouched) {
		t.Errorf("output mentions %s, which was not made stale; output:\n%s", untouched, out)
	}
	if !strings.Contains(out, "were stale") {
		t.Errorf("output lacks the explanation; output:\n%s", out)
	}
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
}
