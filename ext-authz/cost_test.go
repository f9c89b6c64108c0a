package main

import (
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/framelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
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
// (streamlimit, check timeout); its Check (XFCC, certificate cache, lookup,
// metrics) over 256 runtimes. make bench-compare measures the same
// difference between processes; this one shows where it goes (-cpuprofile).
func BenchmarkCheckCost(b *testing.B) {
	dir := b.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		b.Fatal(err)
	}
	o, err := parseFlags([]string{"--kubeconfig=" + kubeconfig}, io.Discard)
	if err != nil {
		b.Fatal(err)
	}
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	store := kymastore.New()
	var reqs []*authv3.CheckRequest
	var ids []string
	var kymas []any
	for i := range 256 {
		id, domain := fmt.Sprintf("runtime-%06d", i), fmt.Sprintf("skr-%06d.kyma.example.com", i)
		leaf, err := ca.Issue(pki.LeafOptions{CommonName: id, DNSNames: []string{domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}})
		if err != nil {
			b.Fatal(err)
		}
		kymas = append(kymas, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{
			Name: id, Namespace: "kcp-system", Annotations: map[string]string{contract.AnnotationSKRDomain: domain},
		}})
		ids = append(ids, id)
		reqs = append(reqs, extauthz.CheckRequest("lifecycle-manager", map[string]string{
			contract.HeaderXFCC: extauthz.GatewayXFCC(leaf.CertPEM, id, leaf.Cert.DNSNames),
		}))
	}
	if err := store.Replace(kymas, ""); err != nil { // the initial list: synced
		b.Fatal(err)
	}
	check := func(reg prometheus.Registerer) authv3.AuthorizationServer {
		metrics, err := server.NewMetrics(reg)
		if err != nil {
			b.Fatal(err)
		}
		return server.New(&pinning.Verifier{Lookup: store}, func() bool { return true }, metrics, logr.Discard())
	}
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
		real  bool // the real Check: answers for the request's runtime
	}{
		{"1-ceiling", func(ln net.Listener, _ prometheus.Registerer) (*grpc.Server, net.Listener) {
			return loadgen.NewGRPCServer(loadgen.AlwaysAllow{}), ln
		}, false},
		{"2-server-options", func(ln net.Listener, _ prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(serverOptions(o)...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, ln
		}, false},
		{"3-framelimit", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(serverOptions(o)...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, frames(ln, reg)
		}, false},
		{"4-streamlimit", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(append(serverOptions(o), tap(reg))...)
			authv3.RegisterAuthorizationServer(gs, loadgen.AlwaysAllow{})
			return gs, frames(ln, reg)
		}, false},
		{"5-ext-authz", func(ln net.Listener, reg prometheus.Registerer) (*grpc.Server, net.Listener) {
			gs := grpc.NewServer(append(serverOptions(o), tap(reg))...)
			authv3.RegisterAuthorizationServer(gs, check(reg))
			return gs, frames(ln, reg)
		}, true},
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
			send := func(off int) loadgen.Do {
				return func(i int) error {
					r := loadgen.Spread(off, i, len(reqs))
					want := ""
					if layer.real {
						want = ids[r]
					}
					return checker.Check(reqs[r], want)
				}
			}
			if _, err := loadgen.Closed(len(reqs), 16, send(0)); err != nil { // warm-up: every certificate once
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			cpu0, err := loadgen.ProcessCPU(os.Getpid())
			if err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			if _, err := loadgen.Closed(b.N, 16, send(1)); err != nil {
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
