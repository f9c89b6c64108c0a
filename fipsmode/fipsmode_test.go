package fipsmode_test

import (
	"crypto/fips140"
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// The test binary runs without the directive; the binaries' FIPS mode is
// tested by test/fips, which starts them.
func TestCollector(t *testing.T) {
	got, err := promtext.Collected(fipsmode.Collector("runtime_watcher_ext_authz_fips140_enabled"))
	if err != nil {
		t.Fatal(err)
	}
	want := 0.0
	if fips140.Enabled() {
		want = 1
	}
	if len(got) != 1 || got[""] != want {
		t.Errorf("samples %v, want one of %v", got, want)
	}
}
