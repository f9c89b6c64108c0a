package certmanager_test

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/seed-c8be168e/runtime-watcher/test/certmanager"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Sign every Certificate in kcp-system with a test CA until ctx ends, as
// cert-manager with a CA Issuer would.
func ExampleRun() {
	var cfg *rest.Config // the KCP API server, e.g. testenv's Cluster.Config
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca, err := pki.NewCA("runtime-watcher local CA")
	if err != nil {
		panic(err)
	}
	go func() { _ = certmanager.Run(ctx, cfg, ca, "kcp-system") }()
}
