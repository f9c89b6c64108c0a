package server_test

import (
	"net"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
)

// ExampleNew serves Check on a gRPC server; it answers 503 until ready
// reports true (in ext-authz: once the Kyma cache synced).
func ExampleNew() {
	var ready atomic.Bool
	metrics, err := server.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		return
	}
	lookup := &mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {ID: "runtime-1", SKRDomain: "skr1.example.com"}}}
	srv := server.New(&identity.Verifier{Lookup: lookup}, ready.Load, metrics, server.Config{})

	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return
	}
	go func() { _ = gs.Serve(lis) }()
	ready.Store(true)
	gs.Stop()
}
