package pacing_test

import (
	"testing"

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
