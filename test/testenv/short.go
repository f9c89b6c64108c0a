package testenv

import "testing"

// SkipIfShort skips a test that needs real API servers (or the project's
// binaries running against them) under `go test -short`: that is the unit
// tier, `make test-unit`, the inner loop, which needs no API server binaries
// and no bin/k8s. `make test` runs without -short, so every test runs there.
// Such a test (or the Test function of a Ginkgo suite) calls it first.
func SkipIfShort(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("needs real API servers or the project's binaries: skipped by -short (make test-unit); make test runs it")
	}
}

// StartForTest is Start for one test: it skips tb under -short
// (SkipIfShort), fails it when the clusters do not start, and stops them
// when tb ends.
func StartForTest(tb testing.TB, names ...string) *Env {
	tb.Helper()
	SkipIfShort(tb)
	env, err := Start(names...)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		if err := env.Stop(); err != nil {
			tb.Error(err)
		}
	})
	return env
}
