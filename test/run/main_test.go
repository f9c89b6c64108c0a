package main

import (
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/listener/example/eventline"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
)

// TestReceivedLine: a change names its object and the time from the demo's
// write; the startup resync (no object, no write) is printed as a resync,
// not as an empty change "not made by this demo".
func TestReceivedLine(t *testing.T) {
	at := time.Date(2026, 11, 25, 11, 26, 18, 559_000_000, time.UTC)
	change := localenv.ReceivedEvent{Time: at, RuntimeID: "runtime-1",
		Watched: eventline.Object{Namespace: "kyma-system", Name: "default"},
		GVK:     eventline.GVK{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"}}
	resync := localenv.ReceivedEvent{Time: at, RuntimeID: "runtime-1", Resync: "startup"}
	for _, tt := range []struct {
		ev      localenv.ReceivedEvent
		written time.Time
		want    string
	}{
		{change, at.Add(-8300 * time.Microsecond),
			`  11:26:18.559  operator received: runtime "runtime-1", Kyma kyma-system/default (operator.kyma-project.io/v1beta2)  SKR write → operator: 8.3ms`},
		{change, time.Time{},
			`  11:26:18.559  operator received: runtime "runtime-1", Kyma kyma-system/default (operator.kyma-project.io/v1beta2)  (a write not made by this demo)`},
		{resync, time.Time{},
			`  11:26:18.559  operator received: runtime "runtime-1", startup resync (it re-reads the whole runtime)`},
	} {
		if got := receivedLine(tt.ev, tt.written); got != tt.want {
			t.Errorf("receivedLine(%+v) =\n%s\nwant\n%s", tt.ev, got, tt.want)
		}
	}
}
