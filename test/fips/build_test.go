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

// TestEveryBuildNamesTheCertifiedModule: the Makefile's build and the
// Dockerfile build with GOFIPS140=fipsmode.Module, as testenv.BuildBinary
// does, so what the tests run is what ships.
func TestEveryBuildNamesTheCertifiedModule(t *testing.T) {
	root := testenv.RepoRoot()
	for file, re := range map[string]*regexp.Regexp{
		"Makefile":   regexp.MustCompile(`(?m)^GOFIPS140 := (\S+)$`),
		"Dockerfile": regexp.MustCompile(`(?m)^ARG GOFIPS140=(\S+)$`),
	} {
		raw, err := os.ReadFile(filepath.Join(root, file))
		if err != nil {
			t.Fatal(err)
		}
		m := re.FindSubmatch(raw)
		if m == nil {
			t.Errorf("%s does not set GOFIPS140 (want %s)", file, fipsmode.Module)
			continue
		}
		if got := string(m[1]); got != fipsmode.Module {
			t.Errorf("%s builds with GOFIPS140=%s, fipsmode.Module is %s", file, got, fipsmode.Module)
		}
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
