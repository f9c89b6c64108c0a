package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/framelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// BenchmarkCheckCost is the CPU per Check of ext-authz's gRPC server built
// up layer by layer from the always-allow ceiling, over loopback gRPC in
// this process (16 concurrent Checks over two connections, loadgen's closed
// loop): cpu-us/op is the process's CPU per Check, client and server; the
// client is the same in every layer, so the differences between layers are
// what each layer costs the server. Layers: the ceiling (grpc-go's
// defaults); ext-authz's server options (windows, stream and message
// limits, keepalive); its listener (framelimit); its stream tap
// (streamlimit, check timeout); stream workers (--stream-workers, the
// default of serverOptions: layers 2–4 run with --stream-workers=0, a
// goroutine per Check as grpc-go's default). The Check itself (XFCC, certificate cache,
// lookup, metrics) is ext-authz/server's BenchmarkCheckInProcess. make
// bench-compare measures the whole difference between processes; these
// show where it goes (-cpuprofile).
func BenchmarkCheckCost(b *testing.B) {
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	o, err := parseFlags([]string{"--kubeconfig=" + kubeconfig, "--stream-workers=0"}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	withWorkers := *o
	withWorkers.streamWorkers = DefaultStreamWorkers
	// A Check as the gateway sends it (the XFCC of a runtime certificate).
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"skr-a.kyma.example.com", "skr-webhook.kyma-system.svc"}})
	if err != nil {
		b.Fatal(err)
	}
	req := extauthz.CheckRequest("lifecycle-manager", map[string]string{
		contract.HeaderXFCC: extauthz.GatewayXFCC(leaf.CertPEM, "runtime-a", leaf.Cert.DNSNames),
	})
	tap := func(reg prometheus.Registerer) grpc.ServerOption {
		streams, err := streamlimit.New(o.maxStreamsAll, reg)
		if err != nil {
			b.Fatal(err)
		}
		return grpc.InTapHandle(streamlimit.WithTimeout(o.checkTimeout, streams.Tap))
	}
	frames := func(ln net.Listener, reg prometheus.Registerer) net.Listener {
		m, err := framelimit.NewMetrics(reg)
		if err != nil {
			b.Fatal(err)
		}
		return &framelimit.Listener{Listener: ln, Metrics: m}
	}
	layers := []struct {
		name  string
		start func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener)
	}{
		{"1-ceiling", func(ln net.Listener, _ prometheus.Registerer) (*grpc.Server, net.Listener) {
			return loadgen.NewGRPCServer(loadgen.AlwaysAllow{}), ln
		}},
		{"2-server-options", func(ln net.Listener, _ prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(serverOptions(o)...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, ln
		}},
		{"3-framelimit", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(serverOptions(o)...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, frames(ln, reg)
		}},
		{"4-streamlimit", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(append(serverOptions(o), tap(reg))...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, frames(ln, reg)
		}},
		{"5-stream-workers", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(append(serverOptions(&withWorkers), tap(reg))...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, frames(ln, reg)
		}},
	}
	for _, layer := range layers {
		b.Run(layer.name, func(b *testing.B) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			gs, served := layer.start(ln, prometheus.NewRegistry())
			go func() { _ = gs.Serve(served) }()
			defer gs.Stop()
			checker, err := loadgen.DialChecker(ln.Addr().String(), 2)
			if err != nil {
				b.Fatal(err)
			}
			defer checker.Close()
			send := func(int) error { return checker.Check(req, "") }
			if _, err := loadgen.Closed(256, 16, send); err != nil { // warm-up
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, err := loadgen.ProcessCPU(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := loadgen.Closed(b.N, 16, send); err != nil {
				b.Fatal(err)
			}
			wall := time.Since(start)
			cpu1, _ := loadgen.ProcessCPU(os.Getpid())
			b.StopTimer()
			b.ReportMetric(loadgen.Micros(cpu1-cpu0)/float64(b.N), "cpu-us/op")
			b.ReportMetric(float64(b.N)/wall.Seconds(), "checks/s")
		})
	}
}
