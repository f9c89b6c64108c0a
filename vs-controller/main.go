// Command vs-controller is Runtime Watcher's KCP controller
// (docs/architecture.md §4.3, §3): it keeps one Istio VirtualService per Watcher
// CR, and for every runtime (Kyma CR) a cert-manager Certificate and the SKR
// bundle (skr-webhook Deployment, Service, Secret and the
// ValidatingWebhookConfiguration built from all Watchers) in the runtime's
// cluster.
package main

import (
	"context"
	"fmt"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/version"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

func main() { startup.Main("vs-controller", parseConfig, run) }

// run runs the manager until ctx ends.
func run(ctx context.Context, c *config, log logr.Logger) error {
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = float32(c.qps), c.burst
	cfg.UserAgent = "vs-controller"
	o := c.o
	mgr, err := vsmanager.New(ctx, cfg, o)
	if err != nil {
		return fmt.Errorf("set up manager: %w", err)
	}
	log.Info("starting", "version", version.Get(), "gatewayNamespace", o.GatewayNamespace, "kymaNamespace", o.KymaNamespace, "skrNamespace", o.Bundle.Namespace,
		"skrWebhookIngressFrom", bundle.FormatIngressFrom(o.Bundle.WebhookIngressFrom))
	if err := mgr.Start(ctx); err != nil {
		return fmt.Errorf("manager stopped: %w", err)
	}
	return nil
}
