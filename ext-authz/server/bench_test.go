package server_test

import (
	"context"
	"crypto/x509"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// BenchmarkCheckInProcess is the CPU cost of one allowed Check without gRPC
// (XFCC parsing, certificate decoding, lookup, response); the end-to-end
// benchmark over gRPC with a real cache is in ext-authz/bench. "ca-file" is
// the same with roots set as ext-authz's --ca-file sets them (SetRoots) (every
// certificate chains to them, so after the first round each Check reads the
// verified-chain cache). Both run with the decision log off;
// BenchmarkDecisionLog compares it on at its defaults.
func BenchmarkCheckInProcess(b *testing.B) {
	b.Run("no-ca-file", func(b *testing.B) { benchmarkCheckInProcess(b, false, server.Config{}) })
	b.Run("ca-file", func(b *testing.B) { benchmarkCheckInProcess(b, true, server.Config{}) })
}

// BenchmarkDecisionLog is the cost of the decision log at its defaults (1 %
// of allows sampled, 100 lines per second, JSON lines to a discarding zap
// core as ext-authz writes them) against the log off, on the allow path.
func BenchmarkDecisionLog(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchmarkCheckInProcess(b, false, server.Config{}) })
	b.Run("defaults", func(b *testing.B) {
		l, err := decisionlog.New(decisionlog.Options{AllowSampleRate: decisionlog.DefaultAllowSampleRate, MaxLinesPerSecond: decisionlog.DefaultMaxLinesPerSec},
			zap.New(zap.WriteTo(io.Discard)), prometheus.NewRegistry())
		if err != nil {
			b.Fatal(err)
		}
		benchmarkCheckInProcess(b, false, server.Config{Log: l})
	})
}

// BenchmarkRateLimit is the cost of the per-runtime rate limit on the allow
// path (package ratelimit, enforce mode, limits no request reaches) against
// no limiter; the goal is ≤ 1.05× of CPU per Check (docs/performance.md).
func BenchmarkRateLimit(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchmarkCheckInProcess(b, false, server.Config{}) })
	b.Run("enforce", func(b *testing.B) {
		l, err := ratelimit.New(ratelimit.Config{Mode: ratelimit.ModeEnforce, Default: ratelimit.Limit{Rate: ratelimit.MaxRate, Burst: ratelimit.MaxBurst}})
		if err != nil {
			b.Fatal(err)
		}
		benchmarkCheckInProcess(b, false, server.Config{Limiter: l})
	})
}

func benchmarkCheckInProcess(b *testing.B, withRoots bool, cfg server.Config) {
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	lookup := &mapLookup{runtimes: map[string]identity.Runtime{}}
	var reqs []string
	for i := range 64 {
		id, domain := fmt.Sprintf("runtime-%d", i), fmt.Sprintf("skr-%d.example.com", i)
		l, err := ca.Issue(pki.LeafOptions{CommonName: id, DNSNames: []string{domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}})
		if err != nil {
			b.Fatal(err)
		}
		lookup.runtimes[id] = identity.Runtime{ID: id, SKRDomain: domain}
		reqs = append(reqs, extauthz.GatewayXFCC(l.CertPEM, id, l.Cert.DNSNames))
	}
	m, err := server.NewMetrics(prometheus.NewRegistry())
	if err != nil {
		b.Fatal(err)
	}
	v := &identity.Verifier{Lookup: lookup}
	if withRoots {
		roots := x509.NewCertPool()
		roots.AddCert(ca.Cert)
		v.SetRoots(roots) // as ext-authz sets (and reloads) --ca-file
	}
	srv := server.New(v, func() bool { return true }, m, cfg)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, err := loadgen.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for i := 0; b.Loop(); i++ {
		resp, err := srv.Check(ctx, extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: reqs[i%len(reqs)]}))
		if err != nil || resp.GetOkResponse() == nil {
			b.Fatalf("not allowed: %v %v", resp, err)
		}
		n++
	}
	// The process's CPU time per Check (docs/architecture.md §3.14: on
	// shared cores wall time per Check mostly measures the neighbours).
	if cpu1, err := loadgen.ProcessCPU(os.Getpid()); err == nil && n > 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(n), "cpu-ns/op")
	}
}
