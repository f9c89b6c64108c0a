package xdstest

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/gateway"
)

// RunGateway runs the stand-in as Node against s until the test ends, with
// its metrics in reg (nil: none), and returns it once e's route is
// programmed and its listener served with the credentials from secrets.
func RunGateway(t testing.TB, s *Server, e Edge, secrets client.Reader, reg prometheus.Registerer) *gateway.Gateway {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	gw, err := gateway.New(gateway.Config{XDSAddr: s.Addr(), Secrets: secrets, Registerer: reg, Log: testr.NewWithInterface(t, testr.Options{}), Node: Node()})
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = gw.Run(ctx) }()
	WaitRoute(t, gw, s, e.Host, contract.EventPath(Manager), UpstreamCluster)
	wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
	defer wcancel()
	if err := gw.WaitServing(wctx); err != nil {
		t.Fatal(err)
	}
	if _, err := gw.Serve(ctx); err != nil {
		t.Fatal(err)
	}
	return gw
}

// WaitRoute waits (by the accepted configuration, not by time) until path
// on host routes to cluster.
func WaitRoute(t testing.TB, gw *gateway.Gateway, s *Server, host, path, cluster string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		changed := gw.Changed()
		if gw.Route(host, path) == cluster {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("path %s not routed to %s (versions %v, NACKs %v)", path, cluster, gw.Versions(), s.Nacks())
		}
	}
}
