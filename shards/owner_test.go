package shards

import (
	"fmt"
	"math"
	"testing"

	coordinationclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
)

// TestOwner: rendezvous hashing spreads runtimes evenly over members of
// any naming (short, StatefulSet ordinals, Deployment pod names), and a
// member that joins takes runtimes only for itself, a member that leaves
// gives away only its own.
func TestOwner(t *testing.T) {
	const n = 25000
	for _, members := range [][]string{
		{"a", "b", "c"},
		{"vs-controller-0", "vs-controller-1", "vs-controller-2", "vs-controller-3"},
		{"module-sync-6f7c9d8b5-x2k4p", "module-sync-6f7c9d8b5-q8zrm", "module-sync-6f7c9d8b5-7tn2w"},
	} {
		count := map[string]int{}
		before := map[string]string{}
		for i := range n {
			r := fmt.Sprintf("kcp-system/runtime-%05d", i)
			before[r] = Owner(r, members[:len(members)-1])
			count[Owner(r, members)]++
		}
		want := float64(n) / float64(len(members))
		sd := math.Sqrt(want * (1 - 1/float64(len(members))))
		for _, m := range members {
			if math.Abs(float64(count[m])-want) > 5*sd {
				t.Errorf("%v: %s owns %d of %d runtimes, want %.0f ± %.0f", members, m, count[m], n, want, 5*sd)
			}
		}
		joined := members[len(members)-1]
		for r, was := range before {
			if now := Owner(r, members); now != was && now != joined {
				t.Errorf("%v: runtime %s moved from %s to %s when %s joined", members, r, was, now, joined)
			}
		}
	}
	if got := Owner("kcp-system/runtime-1", nil); got != "" {
		t.Errorf("owner among no members: %q", got)
	}
}

func TestNewRefusesIdentitiesThatMakeNoLeaseName(t *testing.T) {
	for _, id := range []string{"", "a,b", "Upper", "with space"} {
		if _, err := New(Options{Leases: fakeLeases{}, Namespace: "ns", Group: "g", Identity: id}); err == nil {
			t.Errorf("identity %q accepted", id)
		}
	}
	if _, err := New(Options{Leases: fakeLeases{}, Namespace: "ns", Group: "g", Identity: "module-sync-6f7c9d8b5-x2k4p"}); err != nil {
		t.Errorf("a pod name refused: %v", err)
	}
}

// fakeLeases satisfies Options.Leases for New, which does not call it.
type fakeLeases struct{}

func (fakeLeases) Leases(string) coordinationclient.LeaseInterface { return nil }
