package listener

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestLastSeenConcurrent: touches of known and new runtimes from many
// goroutines, with evictions, expiry and snapshots in between, keep the
// record consistent — at most limit runtimes, the count matching the map,
// every runtime added either kept or counted as evicted or expired (run
// with -race).
func TestLastSeenConcurrent(t *testing.T) {
	var clock atomic.Int64
	base := time.Unix(1_800_000_000, 0)
	now := func() time.Time { return base.Add(time.Duration(clock.Add(1)) * time.Millisecond) }
	evicted := prometheus.NewCounter(prometheus.CounterOpts{Name: "evicted"})
	const limit, ids, workers, rounds = 8, 24, 16, 400
	s := newLastSeen(limit, time.Hour, now, evicted)

	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				s.touch(fmt.Sprintf("runtime-%d", (w*7+i)%ids))
				if i%50 == 0 {
					_ = s.snapshot()
					_, _ = s.get("runtime-0")
				}
			}
		}()
	}
	wg.Wait()

	snap := s.snapshot()
	entries := 0
	s.entries.Range(func(_, v any) bool {
		if v.(*seenEntry).at.Load() == removedAt {
			t.Error("a removed entry is still in the map")
		}
		entries++
		return true
	})
	if len(snap) != s.n || entries != s.n || s.n > limit || s.n == 0 {
		t.Fatalf("snapshot %d, map %d, count %d, limit %d", len(snap), entries, s.n, limit)
	}
	if testutil.ToFloat64(evicted) < ids-limit {
		t.Fatalf("evicted %v, want at least %d", testutil.ToFloat64(evicted), ids-limit)
	}

	// A touch after all others is what get and snapshot return.
	s.touch("runtime-last")
	at, ok := s.get("runtime-last")
	if !ok || !s.snapshot()["runtime-last"].Equal(at) {
		t.Fatalf("runtime-last: %v, %v", at, ok)
	}
	for id, t0 := range snap {
		if t1, ok := s.get(id); ok && t1.Before(t0) {
			t.Errorf("%s went back in time: %v after %v", id, t1, t0)
		}
	}

	// Expiry: an hour later every runtime is forgotten, and a touch adds
	// its runtime anew.
	clock.Add(int64(time.Hour/time.Millisecond) + 1)
	if _, ok := s.get("runtime-last"); ok {
		t.Fatal("runtime-last not forgotten after the retention")
	}
	if snap := s.snapshot(); len(snap) != 0 || s.n != 0 {
		t.Fatalf("after the retention: %v (count %d)", snap, s.n)
	}
	s.touch("runtime-last")
	if _, ok := s.get("runtime-last"); !ok || s.n != 1 {
		t.Fatalf("runtime-last not added anew (count %d)", s.n)
	}
}
