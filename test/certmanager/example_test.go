package certmanager_test

import (
	"context"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/certmanager"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Serve the Certificates in kcp-system until ctx ends, as cert-manager
// would, with a test CA behind the namespaced CA Issuer "runtime-ca": only
// Certificates in kcp-system can use it.
func ExampleRun() {
	var cfg *rest.Config // the KCP API server, e.g. testenv's Cluster.Config
	var c client.Client  // a client of it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ca, err := pki.NewCA("runtime-watcher local CA")
	if err != nil {
		panic(err)
	}
	if err := certmanager.InstallCA(ctx, c, ca, "kcp-system", "runtime-ca"); err != nil {
		panic(err)
	}
	go func() { _ = certmanager.Run(ctx, cfg, certmanager.Options{Namespaces: []string{"kcp-system"}}) }()
}
