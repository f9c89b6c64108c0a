package bench_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// runtimesFlag sizes the fleet: 10,000 by default; the fleet-scale run
// (docs/performance.md) uses -authzbench.runtimes=100000.
var runtimesFlag = flag.Int("authzbench.runtimes", 10000, "Kyma CRs (runtimes) cached by ext-authz in the benchmark")

// requestsFlag sets the Checks per server, concurrency and op.
var requestsFlag = flag.Int("authzbench.requests", 20000, "Checks per server, concurrency and op (a multiple of 500)")

// runtimes and perServer are the fleet size and the Checks per server,
// concurrency and op of this run (the flags, read after flag parsing).
var runtimes, perServer int

const (
	kymaNamespace = "kcp-system"
	// Each benchmark op is one interleaved batch: chunks of chunkSize
	// requests, alternately to the always-allow server and to ext-authz,
	// until each got perServer requests. Interleaving keeps both under the
	// same machine load.
	chunkSize = 500
)

func TestMain(m *testing.M) {
	loadgen.ServeIfChild(nil)         // the always-allow ceiling, re-executed
	ctrllog.SetLogger(logr.Discard()) // testenv's controller-runtime logs
	flag.Parse()
	runtimes, perServer = *runtimesFlag, *requestsFlag
	if runtimes < 1 || runtimes > 1_000_000 || perServer < chunkSize || perServer > 10_000_000 || perServer%chunkSize != 0 {
		fmt.Fprintln(os.Stderr, "-authzbench.runtimes must be in [1, 1000000], -authzbench.requests a multiple of 500 in [500, 10000000]")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// setup starts an API server with `runtimes` Kyma CRs and the real
// ext-authz binary.
func setup(b *testing.B) (*extauthz.Process, *extauthz.Fleet) {
	b.Helper()
	binary, err := testenv.BuildBinary("ext-authz")
	if err != nil {
		b.Fatal(err)
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	kcp := env.Cluster("kcp")
	ctx := context.Background()
	// The fixture's own client is not rate-limited client-side: the
	// bounded pool of creators is the only limit on the API server.
	fastCfg := rest.CopyConfig(kcp.Config)
	fastCfg.QPS, fastCfg.Burst = -1, 0
	fast, err := client.New(fastCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	if err := fast.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNamespace}}); err != nil {
		b.Fatal(err)
	}
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	fleet, err := extauthz.CreateFleet(ctx, fast, ca, kymaNamespace, runtimes, 32)
	if err != nil {
		b.Fatal(err)
	}
	created := time.Since(start)

	start = time.Now()
	p, err := extauthz.Start(binary, os.Stderr, time.Minute, "--kubeconfig="+kcp.KubeconfigPath, "--kyma-namespace="+kymaNamespace)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Stop(15 * time.Second) })
	wctx, cancel := context.WithTimeout(ctx, 15*time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}
	setupNote = fmt.Sprintf("setup: %d Kyma CRs and certificates created in %s, ext-authz ready %s after start",
		runtimes, created.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	return p, fleet
}

// setupNote describes the setup in every sub-benchmark's log (a parent
// benchmark's own log is not printed).
var setupNote string

// checkChunk sends the chunk at offset (a stride through all runtimes) to
// checker from conc senders; every answer must be an allow, for the
// request's runtime when checkID.
func checkChunk(checker *loadgen.Checker, fleet *extauthz.Fleet, checkID bool, offset, n, conc int) ([]time.Duration, error) {
	return loadgen.Closed(n, conc, func(i int) error {
		r := loadgen.Spread(offset, i, len(fleet.Requests))
		want := ""
		if checkID {
			want = fleet.IDs[r]
		}
		return checker.Check(fleet.Requests[r], want)
	})
}

// BenchmarkCheck compares ext-authz (-authzbench.runtimes Kyma CRs cached,
// 10,000 by default) with the always-allow ceiling in a process of its own
// over loopback gRPC (loadgen). One op is a batch of perServer Checks to
// each server, interleaved in chunks, closed loop; run it with -benchtime 1x
// (or Nx for more samples). Metrics: each server's CPU per Check (its own
// process's CPU clock over its chunks), RPS, p50 and p99, their ratios, and
// ext-authz's VmRSS/VmHWM in MiB; the goals (loadgen.ExtAuthzCPUClosed,
// loadgen.ExtAuthzMemory) are logged with pass/fail. make bench-compare
// adds the open loop, the twin and OPA.
func BenchmarkCheck(b *testing.B) {
	p, fleet := setup(b)
	ceiling, err := loadgen.StartChild(loadgen.KindAlwaysAllow, "")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = ceiling.Stop() })
	checkers := make([]*loadgen.Checker, 2)
	for i, addr := range []string{ceiling.Addr, p.GRPCAddr} {
		if checkers[i], err = loadgen.DialChecker(addr, 2); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = checkers[i].Close() })
	}
	pid := p.Cmd.Process.Pid
	targets := []loadgen.Target{
		{Name: "always-allow", CPU: ceiling.CPU},
		{Name: "ext-authz", CPU: func() (time.Duration, error) { return loadgen.ProcessCPU(pid) }},
	}

	rssSynced, err := p.RSSBytes()
	if err != nil {
		b.Fatal(err)
	}
	syncedNote := fmt.Sprintf("ext-authz when ready: VmRSS %.1f MiB; %s", mib(rssSynced), heapStats(p))
	// Warm up connections and both servers, with one request per runtime
	// (ext-authz decodes each certificate once, then answers from its
	// decoded-certificate cache): the runs below measure the steady state.
	for i, c := range checkers {
		if _, err := checkChunk(c, fleet, i == 1, 0, runtimes, 16); err != nil {
			b.Fatalf("%s warm-up: %v", targets[i].Name, err)
		}
	}
	if rss, err := p.RSSBytes(); err == nil {
		hwm, _ := testenv.ProcStatus(pid, "VmHWM")
		syncedNote += fmt.Sprintf("; after warm-up (every certificate decoded once): VmRSS %.1f MiB, VmHWM %.1f MiB", mib(rss), mib(hwm))
	}

	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			chunks := b.N * perServer / chunkSize
			samples, err := loadgen.Interleave(targets, chunks, func(t, round int) ([]time.Duration, error) {
				return checkChunk(checkers[t], fleet, t == 1, round*chunkSize, chunkSize, conc)
			})
			if err != nil {
				b.Fatal(err)
			}
			b.Log(setupNote)
			b.Log(syncedNote)
			a, z := samples[0].Summary(), samples[1].Summary()
			cpuA, cpuZ := samples[0].CPUPerRequest(), samples[1].CPUPerRequest()
			cpuRatio := float64(cpuZ) / float64(cpuA)
			rss, err := p.RSSBytes()
			if err != nil {
				b.Fatal(err)
			}
			hwm, err := testenv.ProcStatus(pid, "VmHWM")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(loadgen.Micros(cpuZ), "authz-cpu-us/op")
			b.ReportMetric(z.RPS, "authz-rps")
			b.ReportMetric(loadgen.Micros(z.P50), "authz-p50-us")
			b.ReportMetric(loadgen.Micros(z.P99), "authz-p99-us")
			b.ReportMetric(loadgen.Micros(cpuA), "allow-cpu-us/op")
			b.ReportMetric(a.RPS, "allow-rps")
			b.ReportMetric(loadgen.Micros(a.P50), "allow-p50-us")
			b.ReportMetric(loadgen.Micros(a.P99), "allow-p99-us")
			b.ReportMetric(cpuRatio, "cpu-ratio")
			b.ReportMetric(z.RPS/a.RPS, "rps-ratio")
			b.ReportMetric(float64(z.P99)/float64(a.P99), "p99-ratio")
			b.ReportMetric(mib(rss), "authz-rss-MiB")
			b.ReportMetric(mib(hwm), "authz-hwm-MiB")
			g := loadgen.ExtAuthzCPUClosed
			b.Logf("concurrency %d: ext-authz %.1f µs CPU per Check, %.0f rps, p50 %.0fµs, p99 %.0fµs | always-allow %.1f µs, %.0f rps, p50 %.0fµs, p99 %.0fµs | CPU %.2f× (goal %s: %s), RPS %.0f %%, p99 %.2f× (information)",
				conc, loadgen.Micros(cpuZ), z.RPS, loadgen.Micros(z.P50), loadgen.Micros(z.P99), loadgen.Micros(cpuA), a.RPS, loadgen.Micros(a.P50), loadgen.Micros(a.P99),
				cpuRatio, g, g.Verdict(cpuRatio), 100*z.RPS/a.RPS, float64(z.P99)/float64(a.P99))
			anon, _ := testenv.ProcStatus(pid, "RssAnon")
			file, _ := testenv.ProcStatus(pid, "RssFile")
			memGoal := "no goal at this size"
			if mg, ok := loadgen.ExtAuthzMemory(runtimes); ok {
				memGoal = fmt.Sprintf("goal %s: %s", mg, mg.Verdict(mib(hwm)))
			}
			b.Logf("ext-authz VmRSS %.1f MiB after sync, %.1f MiB after load (anon %.1f, file %.1f), VmHWM %.1f MiB (%s) with %d Kyma CRs cached; %s",
				mib(rssSynced), mib(rss), mib(anon), mib(file), mib(hwm), memGoal, runtimes, heapStats(p))
		})
	}
}

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// heapStats summarizes the Go heap figures ext-authz exports in /metrics.
func heapStats(p *extauthz.Process) string {
	text, err := p.Metrics()
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, line := range strings.Split(text, "\n") {
		for _, m := range []string{"go_memstats_heap_alloc_bytes ", "go_memstats_heap_inuse_bytes ", "go_memstats_sys_bytes "} {
			if v, ok := strings.CutPrefix(line, m); ok {
				var f float64
				if _, err := fmt.Sscanf(v, "%g", &f); err == nil {
					out = append(out, fmt.Sprintf("%s%.1f MiB", strings.TrimPrefix(m, "go_memstats_"), f/(1<<20)))
				}
			}
		}
	}
	return strings.Join(out, ", ")
}
