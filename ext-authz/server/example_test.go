package server_test

import (
	"context"
	"fmt"
	"net"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
)

// ExampleNew serves Check on a gRPC server; it answers 503 until ready
// reports true (in ext-authz: once the Kyma cache synced), then decides:
// here a request without a client certificate is denied.
func ExampleNew() {
	var ready atomic.Bool
	metrics, err := server.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		panic(err)
	}
	lookup := &mapLookup{runtimes: map[string]identity.Runtime{"runtime-1": {ID: "runtime-1", SKRDomain: "skr1.example.com"}}}
	srv := server.New(&identity.Verifier{Lookup: lookup}, ready.Load, metrics, server.Config{})

	gs := grpc.NewServer()
	authv3.RegisterAuthorizationServer(gs, srv)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	go func() { _ = gs.Serve(lis) }()
	defer gs.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer func() { _ = conn.Close() }()
	client := authv3.NewAuthorizationClient(conn)
	check := func() {
		resp, err := client.Check(context.Background(), &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Method: "POST", Path: "/v2/lifecycle-manager/event", Headers: map[string]string{}}},
		}})
		if err != nil {
			panic(err)
		}
		denied := resp.GetDeniedResponse()
		fmt.Println(denied.GetStatus().GetCode(), headerValue(denied.GetHeaders(), "x-watcher-deny-reason"))
	}
	check()
	ready.Store(true)
	check()
	// Output:
	// ServiceUnavailable not-ready
	// Forbidden missing-client-cert
}

func headerValue(headers []*corev3.HeaderValueOption, name string) string {
	for _, h := range headers {
		if h.GetHeader().GetKey() == name {
			return h.GetHeader().GetValue()
		}
	}
	return ""
}
