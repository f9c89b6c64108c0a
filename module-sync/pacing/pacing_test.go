package pacing_test

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
)

func TestTurns(t *testing.T) {
	var turns pacing.Turns
	release, ok := turns.Take("kcp-system/a")
	if !ok {
		t.Fatal("first pass of a runtime has no turn")
	}
	if _, ok := turns.Take("kcp-system/a"); ok {
		t.Error("a second pass of a busy runtime got a turn")
	}
	releaseB, ok := turns.Take("kcp-system/b")
	if !ok {
		t.Error("another runtime waits for a busy one")
	}
	releaseB()
	release()
	if release, ok := turns.Take("kcp-system/a"); !ok {
		t.Error("no turn after the pass ended")
	} else {
		release()
	}
}
