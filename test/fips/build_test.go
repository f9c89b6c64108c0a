package fips_test

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestEveryBuildNamesTheCertifiedModule: the Makefile builds with
// GOFIPS140=fipsmode.Module, as testenv.BuildBinary does — the binaries of
// bin/ and those `make images` puts into the images (the Dockerfile
// compiles nothing: it copies what the Makefile built) — so what the tests
// run is what ships.
func TestEveryBuildNamesTheCertifiedModule(t *testing.T) {
	root := testenv.RepoRoot()
	raw, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^GOFIPS140 := (\S+)$`).FindSubmatch(raw)
	if m == nil {
		t.Fatalf("the Makefile does not set GOFIPS140 (want %s)", fipsmode.Module)
	}
	if got := string(m[1]); got != fipsmode.Module {
		t.Errorf("the Makefile builds with GOFIPS140=%s, fipsmode.Module is %s", got, fipsmode.Module)
	}
	// Every build of the shipped binaries (targets build and images: go
	// build ./$$b over BINARIES) passes it.
	builds := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.Contains(line, "go build") && strings.Contains(line, "./$$b") {
			builds++
			if !strings.Contains(line, "GOFIPS140=$(GOFIPS140)") {
				t.Errorf("a build of the binaries does not pass GOFIPS140=$(GOFIPS140): %s", strings.TrimSpace(line))
			}
		}
	}
	if builds < 2 {
		t.Errorf("found %d builds of the binaries in the Makefile, want those of build and images", builds)
	}
	docker, err := os.ReadFile(filepath.Join(root, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(docker), "go build") {
		t.Error("the Dockerfile compiles a binary: it must copy what `make images` built with GOFIPS140")
	}
}

// TestBinariesCarryTheCertifiedModule reads the build information of every
// binary as testenv builds it: the certified module, FIPS mode on by
// default. It builds every binary, so it is not part of -short
// (TestEveryBuildNamesTheCertifiedModule is: the builds' settings).
func TestBinariesCarryTheCertifiedModule(t *testing.T) {
	testenv.SkipIfShort(t) // builds all six binaries
	for _, name := range testenv.Binaries {
		bin, err := testenv.BuildBinary(name)
		if err != nil {
			t.Fatal(err)
		}
		// The toolchain records the snapshot's full name, e.g. v1.0.0-c2097c7c.
		if got := buildSetting(t, bin, "GOFIPS140"); got != fipsmode.Module && !strings.HasPrefix(got, fipsmode.Module+"-") {
			t.Errorf("%s: built with GOFIPS140=%q, want %s", name, got, fipsmode.Module)
		}
		if got := buildSetting(t, bin, "DefaultGODEBUG"); !slices.Contains(strings.Split(got, ","), "fips140=on") {
			t.Errorf("%s: DefaultGODEBUG %q lacks fips140=on", name, got)
		}
	}
}
