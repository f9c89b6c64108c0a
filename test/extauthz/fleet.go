package extauthz

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Fleet is n runtimes as the benchmarks use them: runtime-%06d with the
// SKR domain skr-%06d.kyma.example.com, a Kyma CR each, and the Check the
// gateway sends for an event of each (a certificate from the CA, in XFCC).
type Fleet struct {
	IDs      []string
	Domains  []string
	Requests []*authv3.CheckRequest
}

// CreateFleet issues the certificates and creates the Kyma CRs in
// namespace with workers concurrent creators (the client's own rate limit
// applies).
func CreateFleet(ctx context.Context, c client.Client, ca *pki.CA, namespace string, n, workers int) (*Fleet, error) {
	f := &Fleet{IDs: make([]string, n), Domains: make([]string, n), Requests: make([]*authv3.CheckRequest, n)}
	var next atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for range max(1, workers) {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f.create(ctx, c, ca, namespace, i); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		})
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return nil, *err
	}
	return f, nil
}

func (f *Fleet) create(ctx context.Context, c client.Client, ca *pki.CA, namespace string, i int) error {
	name := fmt.Sprintf("runtime-%06d", i)
	domain := fmt.Sprintf("skr-%06d.kyma.example.com", i)
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: name, DNSNames: []string{domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}})
	if err != nil {
		return err
	}
	// Real Kyma CRs carry more metadata than pinning reads.
	k := Kyma(namespace, name, domain, map[string]string{
		"operator.kyma-project.io/managed-by": "lifecycle-manager",
		"kyma-project.io/global-account-id":   fmt.Sprintf("ga-%06d", i),
	})
	if err := c.Create(ctx, k); err != nil {
		return err
	}
	f.IDs[i], f.Domains[i] = name, domain
	f.Requests[i] = CheckRequest("lifecycle-manager", map[string]string{
		contract.HeaderXFCC: GatewayXFCC(leaf.CertPEM, name, leaf.Cert.DNSNames),
	})
	return nil
}
