package bench_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// runtimesFlag sizes the fleet: 10,000 by default; the fleet-scale run
// (docs/performance.md) uses -authzbench.runtimes=100000.
var runtimesFlag = flag.Int("authzbench.runtimes", 10000, "Kyma CRs (runtimes) cached by ext-authz in the benchmark")

// runtimes is the fleet size of this run (runtimesFlag, read after flag parsing).
var runtimes int

const (
	kymaNamespace = "kcp-system"
	// Each benchmark op is one interleaved batch: chunks of chunkSize
	// requests, alternately to the always-allow server and to ext-authz,
	// until each got perServer requests. Interleaving keeps both under the
	// same machine load.
	perServer = 20000
	chunkSize = 500
	// allowServerEnv makes the test binary an always-allow Check server.
	allowServerEnv = "EXT_AUTHZ_BENCH_ALLOW_SERVER"
)

func TestMain(m *testing.M) {
	if os.Getenv(allowServerEnv) == "1" {
		os.Exit(serveAlwaysAllow())
	}
	ctrllog.SetLogger(logr.Discard()) // testenv's controller-runtime logs
	flag.Parse()
	runtimes = *runtimesFlag
	if runtimes < 1 || runtimes > 1_000_000 {
		fmt.Fprintln(os.Stderr, "-authzbench.runtimes must be in [1, 1000000]")
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// alwaysAllow answers every Check with OK and the same upstream headers as
// ext-authz, without looking at the request: the cost of gRPC alone.
type alwaysAllow struct {
	authv3.UnimplementedAuthorizationServer
}

func (alwaysAllow) Check(context.Context, *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.OK)},
		HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{Headers: []*corev3.HeaderValueOption{
			{Header: &corev3.HeaderValue{Key: contract.HeaderRuntimeID, Value: "runtime-00000"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
			{Header: &corev3.HeaderValue{Key: contract.HeaderSKRDomain, Value: "skr-00000.kyma.example.com"}, AppendAction: corev3.HeaderValueOption_OVERWRITE_IF_EXISTS_OR_ADD},
		}}},
	}, nil
}

// serveAlwaysAllow runs in the re-executed test binary: it serves on a
// loopback port, prints it, and stops on SIGTERM.
func serveAlwaysAllow() int {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	gs := grpc.NewServer(grpc.MaxRecvMsgSize(4 << 20))
	authv3.RegisterAuthorizationServer(gs, alwaysAllow{})
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM)
	go func() { <-sig; gs.Stop() }()
	fmt.Printf("ALLOW_ADDR=%s\n", lis.Addr())
	if err := gs.Serve(lis); err != nil {
		return 1
	}
	return 0
}

// startAlwaysAllow re-executes the test binary as the always-allow server.
func startAlwaysAllow(b *testing.B) string {
	b.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), allowServerEnv+"=1")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "ALLOW_ADDR="); ok {
			go func() { _, _ = bufio.NewReader(out).WriteTo(discard{}) }()
			return addr
		}
	}
	b.Fatal("always-allow server did not start")
	return ""
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }

// setup starts an API server with `runtimes` Kyma CRs and the real
// ext-authz binary, and returns one request per runtime.
func setup(b *testing.B) (*extauthz.Process, []*authv3.CheckRequest, []string) {
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
	// bounded pool below is the only limit on the API server.
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
	reqs := make([]*authv3.CheckRequest, runtimes)
	ids := make([]string, runtimes)
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		errMu sync.Mutex
		first error
	)
	for range 32 { // bounded pool of creators
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= runtimes {
					return
				}
				name := fmt.Sprintf("runtime-%06d", i)
				domain := fmt.Sprintf("skr-%06d.kyma.example.com", i)
				leaf, err := ca.Issue(pki.LeafOptions{CommonName: name, DNSNames: []string{domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}})
				if err == nil {
					// Real Kyma CRs carry more metadata than pinning reads.
					k := extauthz.Kyma(kymaNamespace, name, domain, map[string]string{
						"operator.kyma-project.io/managed-by": "lifecycle-manager",
						"kyma-project.io/global-account-id":   fmt.Sprintf("ga-%06d", i),
					})
					err = fast.Create(ctx, k)
				}
				if err != nil {
					errMu.Lock()
					first = err
					errMu.Unlock()
					return
				}
				ids[i] = name
				reqs[i] = extauthz.CheckRequest("lifecycle-manager", map[string]string{
					contract.HeaderXFCC: extauthz.GatewayXFCC(leaf.CertPEM, name, leaf.Cert.DNSNames),
				})
			}
		}()
	}
	wg.Wait()
	if first != nil {
		b.Fatal(first)
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
	return p, reqs, ids
}

// setupNote describes the setup in every sub-benchmark's log (a parent
// benchmark's own log is not printed).
var setupNote string

// load sends n requests over conc workers to client and returns the
// latencies; every answer must be an allow, and when ids is given, for the
// runtime of the request.
func load(b *testing.B, client authv3.AuthorizationClient, reqs []*authv3.CheckRequest, ids []string, offset, n, conc int) []time.Duration {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var wg sync.WaitGroup
	var bad atomic.Value
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				r := (offset + i*7919) % len(reqs) // a permutation of all runtimes
				t0 := time.Now()
				resp, err := client.Check(context.Background(), reqs[r])
				lat[i] = time.Since(t0)
				if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
					bad.Store(fmt.Sprintf("%v %v", err, resp))
				} else if ids != nil && resp.GetOkResponse().GetHeaders()[0].GetHeader().GetValue() != ids[r] {
					bad.Store(fmt.Sprintf("allowed as %v, want %s", resp.GetOkResponse().GetHeaders(), ids[r]))
				}
			}
		}()
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		b.Fatalf("a Check was not allowed: %v", v)
	}
	return lat
}

type stats struct{ rps, p50, p99 float64 }

func summarize(lat []time.Duration, elapsed time.Duration) stats {
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) }
	return stats{rps: float64(len(lat)) / elapsed.Seconds(), p50: q(0.50), p99: q(0.99)}
}

func dial(b *testing.B, addr string) []authv3.AuthorizationClient {
	b.Helper()
	// Envoy keeps a few HTTP/2 connections to a gRPC service (one per
	// worker thread); do the same for both servers.
	var cs []authv3.AuthorizationClient
	for range 2 {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		cs = append(cs, authv3.NewAuthorizationClient(conn))
	}
	return cs
}

// multi spreads Checks over several connections.
type multi struct {
	cs []authv3.AuthorizationClient
	n  atomic.Uint64
}

func (m *multi) Check(ctx context.Context, in *authv3.CheckRequest, opts ...grpc.CallOption) (*authv3.CheckResponse, error) {
	return m.cs[m.n.Add(1)%uint64(len(m.cs))].Check(ctx, in, opts...)
}

// BenchmarkCheck compares ext-authz (-authzbench.runtimes Kyma CRs cached, 10,000 by default) with an
// always-allow server over loopback gRPC. One op is a batch of perServer
// Checks to each server, interleaved in chunks; run it with -benchtime 1x
// (or Nx for more samples). Metrics: rps, p50-us and p99-us of each server,
// their ratios, and ext-authz's VmRSS/VmHWM in MiB.
func BenchmarkCheck(b *testing.B) {
	p, reqs, ids := setup(b)
	authz := &multi{cs: dial(b, p.GRPCAddr)}
	allow := &multi{cs: dial(b, startAlwaysAllow(b))}

	rssSynced, err := p.RSSBytes()
	if err != nil {
		b.Fatal(err)
	}
	syncedNote := fmt.Sprintf("ext-authz when ready: VmRSS %.1f MiB; %s", float64(rssSynced)/(1<<20), heapStats(p))
	// Warm up connections and both servers, with one request per runtime
	// (ext-authz decodes each certificate once, then answers from its
	// decoded-certificate cache): the runs below measure the steady state.
	load(b, authz, reqs, ids, 0, runtimes, 16)
	load(b, allow, reqs, nil, 0, runtimes, 16)
	if rss, err := p.RSSBytes(); err == nil {
		hwm, _ := procStatus(p.Cmd.Process.Pid, "VmHWM:")
		syncedNote += fmt.Sprintf("; after warm-up (every certificate decoded once): VmRSS %.1f MiB, VmHWM %.1f MiB", float64(rss)/(1<<20), float64(hwm)/(1<<20))
	}

	for _, conc := range []int{16, 64} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			var latA, latZ []time.Duration
			var tA, tZ time.Duration
			for op := range b.N {
				for c := 0; c < perServer/chunkSize; c++ {
					off := op*perServer + c*chunkSize
					t0 := time.Now()
					latA = append(latA, load(b, allow, reqs, nil, off, chunkSize, conc)...)
					tA += time.Since(t0)
					t0 = time.Now()
					latZ = append(latZ, load(b, authz, reqs, ids, off, chunkSize, conc)...)
					tZ += time.Since(t0)
				}
			}
			b.Log(setupNote)
			b.Log(syncedNote)
			a, z := summarize(latA, tA), summarize(latZ, tZ)
			rss, err := p.RSSBytes()
			if err != nil {
				b.Fatal(err)
			}
			hwm, err := procStatus(p.Cmd.Process.Pid, "VmHWM:")
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(z.rps, "authz-rps")
			b.ReportMetric(z.p50, "authz-p50-us")
			b.ReportMetric(z.p99, "authz-p99-us")
			b.ReportMetric(a.rps, "allow-rps")
			b.ReportMetric(a.p50, "allow-p50-us")
			b.ReportMetric(a.p99, "allow-p99-us")
			b.ReportMetric(z.rps/a.rps, "rps-ratio")
			b.ReportMetric(z.p99/a.p99, "p99-ratio")
			b.ReportMetric(float64(rss)/(1<<20), "authz-rss-MiB")
			b.ReportMetric(float64(hwm)/(1<<20), "authz-hwm-MiB")
			b.Logf("concurrency %d: ext-authz %.0f rps p50 %.0fµs p99 %.0fµs | always-allow %.0f rps p50 %.0fµs p99 %.0fµs | rps %.0f%% (target ≥ 60%%), p99 %.2f× (target ≤ 1.5×)",
				conc, z.rps, z.p50, z.p99, a.rps, a.p50, a.p99, 100*z.rps/a.rps, z.p99/a.p99)
			anon, _ := procStatus(p.Cmd.Process.Pid, "RssAnon:")
			file, _ := procStatus(p.Cmd.Process.Pid, "RssFile:")
			b.Logf("ext-authz VmRSS %.1f MiB after sync, %.1f MiB after load (anon %.1f, file %.1f), VmHWM %.1f MiB (target ≤ 64 MiB) with %d Kyma CRs cached; %s",
				float64(rssSynced)/(1<<20), float64(rss)/(1<<20), float64(anon)/(1<<20), float64(file)/(1<<20), float64(hwm)/(1<<20), runtimes, heapStats(p))
		})
	}
}

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

// procStatus reads a kB field of /proc/<pid>/status in bytes.
func procStatus(pid int, field string) (int64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, field); ok {
			var kb int64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb); err != nil {
				return 0, err
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", field, pid)
}
