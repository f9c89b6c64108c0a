package e2e_test

import (
	"testing"

	"github.com/onsi/ginkgo/v2/types"
)

// TestLabelFilterLeavesKindOnlySpecsOutOutsideKind: `make e2e` and `make
// test` (the local environment) never select a spec labelled kind-only,
// whatever label filter they are given; on kind the given filter stands.
func TestLabelFilterLeavesKindOnlySpecsOutOutsideKind(t *testing.T) {
	kindFaults := []string{kindOnly, "kind-faults"}
	rotation := []string{"ca-rotation"}
	for _, tc := range []struct {
		env, given string
		labels     []string
		want       bool
	}{
		{"local", "", kindFaults, false},
		{"local", "kind-faults", kindFaults, false},
		{"local", "kind-faults || ca-rotation", kindFaults, false},
		{"local", "kind-faults || ca-rotation", rotation, true},
		{"local", "", rotation, true},
		{"local", "!ca-rotation", rotation, false},
		{"", "", kindFaults, false},
		{"kind", "", kindFaults, true},
		{"kind", "kind-faults || (!delivery && !edge)", kindFaults, true},
		{"kind", "kind-faults || (!delivery && !edge)", rotation, true},
		{"kind", "!kind-faults", kindFaults, false},
	} {
		f := labelFilter(tc.env, tc.given)
		match, err := types.ParseLabelFilter(f)
		if err != nil {
			t.Fatalf("labelFilter(%q, %q) = %q: %v", tc.env, tc.given, f, err)
		}
		if got := match(tc.labels); got != tc.want {
			t.Errorf("labelFilter(%q, %q) = %q selects %v: %t, want %t", tc.env, tc.given, f, tc.labels, got, tc.want)
		}
	}
}
