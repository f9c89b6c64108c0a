package localenv

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

func TestDeliveryFlagsOptTheSampleManagerInToHeartbeats(t *testing.T) {
	s := &System{Dir: t.TempDir()}
	flags, err := s.deliveryFlags(Options{HeartbeatInterval: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"--managers-file", s.WebhookManagersFile(), "--heartbeat-interval", "1s"}
	if !slices.Equal(flags, want) {
		t.Errorf("flags %q, want %q", flags, want)
	}
	got, err := os.ReadFile(s.WebhookManagersFile())
	if err != nil {
		t.Fatal(err)
	}
	// The line vs-controller writes for the sample Watcher (spec.heartbeats).
	if line := Manager + " " + contract.ManagerHeartbeats + "\n"; string(got) != line {
		t.Errorf("managers file %q, want %q", got, line)
	}

	flags, err = s.deliveryFlags(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if slices.Contains(flags, "--heartbeat-interval") {
		t.Errorf("--heartbeat-interval without Options.HeartbeatInterval: %q", flags)
	}
}
