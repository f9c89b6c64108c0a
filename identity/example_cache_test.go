package identity_test

import (
	"context"
	"fmt"

	"k8s.io/client-go/rest"

	"github.com/seed-c8be168e/runtime-watcher/identity"
)

// ExampleNewKymaCache wires SAN pinning to the Kyma CRs of a cluster, as
// ext-authz and the listener's in-process mode do.
func ExampleNewKymaCache() {
	ctx := context.Background()
	cfg, err := rest.InClusterConfig()
	if err != nil {
		fmt.Println(err)
		return
	}
	kymas, err := identity.NewKymaCache(ctx, cfg, "kcp-system")
	if err != nil {
		fmt.Println(err) // e.g. the Kyma CRD is not installed
		return
	}
	go func() { _ = kymas.Start(ctx) }()
	if !kymas.WaitForCacheSync(ctx) {
		return
	}
	v := &identity.Verifier{Lookup: identity.NewKymaLookup(kymas, "kcp-system")}
	id, err := v.Verify(ctx, "Hash=...;Cert=\"...\"", "")
	fmt.Println(id, err)
}
