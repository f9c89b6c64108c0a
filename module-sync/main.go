// Command module-sync is Runtime Watcher's module resource sync
// (docs/architecture.md §4.11): a KCP operator built on the listener. It keeps
// its Watchers for the configured Module CR resources, mirrors every
// runtime's Module CRs into ModuleConfigs (on each watcher event, at start
// and periodically) and applies SyncResources into the runtimes. See
// module-sync/README.md and docs/module-sync.md.
package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

func main() { startup.Main("module-sync", parseConfig, run) }

// run runs the manager until ctx ends.
func run(ctx context.Context, c *config, log logr.Logger) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(c.qps), c.burst
	cfg.UserAgent = "module-sync"
	mgr, err := syncmanager.New(ctx, cfg, c.o, nil)
	if err != nil {
		return fmt.Errorf("set up manager: %w", err)
	}
	log.Info("starting", "version", version.Get(), "kymaNamespace", c.o.KymaNamespace, "moduleResources", c.moduleResources, "listenAddr", c.o.ListenAddr)
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
