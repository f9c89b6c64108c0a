package pacing_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
)

func TestTurns(t *testing.T) {
	var turns pacing.Turns
	woken := map[string]int{}
	wake := func(item string) func() { return func() { woken[item]++ } }
	release, ok := turns.Take("kcp-system/a", "mirror a", wake("mirror a"))
	if !ok {
		t.Fatal("first pass of a runtime has no turn")
	}
	if _, ok := turns.Take("kcp-system/a", "sync a-1", wake("sync a-1")); ok {
		t.Error("a second pass of a busy runtime got a turn")
	}
	// The same pass asks again while it waits (an event brought it back):
	// it is still woken once.
	if _, ok := turns.Take("kcp-system/a", "sync a-1", wake("sync a-1")); ok {
		t.Error("a second pass of a busy runtime got a turn")
	}
	if _, ok := turns.Take("kcp-system/a", "sync a-2", wake("sync a-2")); ok {
		t.Error("a third pass of a busy runtime got a turn")
	}
	if n := turns.Waiting(); n != 2 {
		t.Errorf("%d passes wait, want 2", n)
	}
	releaseB, ok := turns.Take("kcp-system/b", "mirror b", wake("mirror b"))
	if !ok {
		t.Error("another runtime waits for a busy one")
	}
	releaseB()
	if len(woken) != 0 {
		t.Errorf("releasing runtime b woke %v", woken)
	}
	release()
	if woken["sync a-1"] != 1 || woken["sync a-2"] != 1 || len(woken) != 2 {
		t.Errorf("releasing runtime a woke %v, want each waiting pass once", woken)
	}
	if n := turns.Waiting(); n != 0 {
		t.Errorf("%d passes still wait after the release", n)
	}
	release, ok = turns.Take("kcp-system/a", "sync a-1", wake("sync a-1"))
	if !ok {
		t.Fatal("no turn after the pass ended")
	}
	release()
	if woken["sync a-1"] != 1 {
		t.Errorf("a release with nobody waiting woke %v", woken)
	}
}

func TestNoTurns(t *testing.T) {
	var turns *pacing.Turns
	for range 2 {
		release, ok := turns.Take("kcp-system/a", "mirror a", func() { t.Error("woken without turns") })
		if !ok {
			t.Fatal("without turns every pass runs")
		}
		defer release()
	}
}

// TestTurnsWakeThroughTheControllerQueue: the wake-up of a pass that found
// its runtime busy reaches controller-runtime's own queue (the priority
// queue, its default) and brings the pass back at once, not after the
// fallback Wait, whether the turn is released after the waiting pass
// ended (its RequeueAfter Wait already queued) or while it still runs (the
// item locked in the queue).
func TestTurnsWakeThroughTheControllerQueue(t *testing.T) {
	for _, releaseWhile := range []string{"after the waiting pass ended", "while the waiting pass runs"} {
		t.Run(releaseWhile, func(t *testing.T) {
			q := priorityqueue.New[reconcile.Request]("turns-test")
			defer q.ShutDown()
			var requeue pacing.Requeue
			if err := requeue.Source().Start(context.Background(), q); err != nil {
				t.Fatal(err)
			}
			var turns pacing.Turns
			b := reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "kcp-system", Name: "sync-b"}}
			// get is the worker's next item; false when none comes within
			// a second (Wait is 5 s).
			get := func() bool {
				got := make(chan reconcile.Request, 1)
				go func() {
					if req, shutdown := q.Get(); !shutdown {
						got <- req
					}
				}()
				select {
				case req := <-got:
					if req != b {
						t.Fatalf("got %v, want %v", req, b)
					}
					return true
				case <-time.After(time.Second):
					return false
				}
			}
			release, ok := turns.Take("kcp-system/a", "mirror a", requeue.Wake(reconcile.Request{}))
			if !ok {
				t.Fatal("no turn for the first pass")
			}
			q.Add(b)
			if !get() {
				t.Fatal("the waiting pass never ran")
			}
			if _, ok := turns.Take("kcp-system/a", "sync b", requeue.Wake(b)); ok {
				t.Fatal("a busy runtime gave a second turn")
			}
			if releaseWhile == "while the waiting pass runs" {
				release()
			}
			// The pass ends as controller-runtime ends it: its result's
			// RequeueAfter, then Done.
			q.Forget(b)
			q.AddWithOpts(priorityqueue.AddOpts{After: pacing.Wait}, b)
			q.Done(b)
			if releaseWhile == "after the waiting pass ended" {
				release()
			}
			if !get() {
				t.Fatalf("the released turn did not bring the waiting pass back within a second (fallback %s)", pacing.Wait)
			}
			if release, ok := turns.Take("kcp-system/a", "sync b", requeue.Wake(b)); !ok {
				t.Error("no turn after the release")
			} else {
				release()
			}
		})
	}
}
