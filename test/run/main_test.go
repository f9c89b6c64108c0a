package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/listener/example/eventline"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
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

// TestShimsCoverEveryAsset: make run's shims stand in for every binary
// testenv runs from its assets folder (kube-controller-manager was once
// missing: make run stopped with "kube-controller-manager not found").
func TestShimsCoverEveryAsset(t *testing.T) {
	for _, k := range []string{envRealAssets, envRealSKRAssets, envRunnerPID, "KUBEBUILDER_ASSETS", "SKR_KUBEBUILDER_ASSETS"} {
		t.Setenv(k, "") // restored after the test; installShims sets them
	}
	dir := t.TempDir()
	if err := installShims(dir, "/real/assets", "/real/skr-assets"); err != nil {
		t.Fatal(err)
	}
	assets, err := testenv.AssetsDir()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "assets"); assets != want {
		t.Fatalf("testenv.AssetsDir() = %s, want the shims' %s", assets, want)
	}
	for _, name := range testenv.AssetBinaries {
		if _, err := os.Stat(filepath.Join(assets, name)); err != nil {
			t.Errorf("no shim for %s: %v", name, err)
		}
	}
	skr, err := testenv.SKRAssetsDir()
	if err != nil {
		t.Fatalf("no shim for the SKR's kube-apiserver: %v", err)
	}
	if want := filepath.Join(dir, skrShims); skr != want {
		t.Fatalf("testenv.SKRAssetsDir() = %s, want the shims' %s", skr, want)
	}
}
