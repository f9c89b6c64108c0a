// Command benchcompare is `make bench-compare`: on this machine, in one run,
// it measures side by side with the same requests and its own bounded load
// loop (loopback only):
//
//   - ext-authz (the real binary, N Kyma CRs in a real API server) vs an
//     always-allow ext_authz server (the ceiling, same grpc-go) vs an ext_authz
//     server deciding with OPA (a prepared Rego SAN-pinning query over the
//     same runtimes, as opa-envoy-plugin does), at 16 and 64 concurrent
//     requests over two HTTP/2 connections each (as Envoy keeps them);
//   - the listener vs bare net/http (the ceiling reads the body and the
//     same XFCC and runtime-id headers), at 16 and 64 connections;
//   - the skr-webhook's admission latency with the KCP healthy, refusing and
//     blackholed (skr-webhook's BenchmarkAdmissionLatency).
//
// Servers of one comparison get interleaved chunks of requests, so they
// share the same machine load. Everything is repeated -n times; the table
// holds the medians and the goals (issue 18), and is written to -out.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const kymaNamespace = "kcp-system"

type options struct {
	n, runtimes, requests, chunk int
	out                          string
	skipWebhook                  bool
}

// gatewayAuthzTimeout is the ext_authz provider's timeout of the gateway
// (manifests/istio/istiod-values.yaml): Envoy sends it with every Check.
const gatewayAuthzTimeout = 500 * time.Millisecond

func main() {
	if kind := os.Getenv("BENCHCOMPARE_SERVE"); kind != "" {
		os.Exit(serve(kind, os.Getenv("BENCHCOMPARE_RUNTIMES")))
	}
	var o options
	flag.IntVar(&o.n, "n", 3, "repetitions; the table holds the medians")
	flag.IntVar(&o.runtimes, "runtimes", 10000, "Kyma CRs (and client certificates)")
	flag.IntVar(&o.requests, "requests", 20000, "requests per server, concurrency and repetition")
	flag.IntVar(&o.chunk, "chunk", 500, "requests per interleaved chunk")
	flag.StringVar(&o.out, "out", filepath.Join(testenv.RepoRoot(), "bin", "bench-compare.md"), "file for the table")
	flag.BoolVar(&o.skipWebhook, "skip-webhook", false, "leave out the webhook's admission latency")
	flag.Parse()
	if o.n < 1 || o.n > 50 || o.runtimes < 1 || o.runtimes > 200000 || o.requests < o.chunk || o.chunk < 1 || o.requests > 1000000 {
		fmt.Fprintln(os.Stderr, "benchcompare: flags out of bounds (1 ≤ n ≤ 50, 1 ≤ runtimes ≤ 200000, chunk ≤ requests ≤ 1000000)")
		os.Exit(2)
	}
	ctrllog.SetLogger(logr.Discard())
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "benchcompare:", err)
		os.Exit(1)
	}
}

// row is one server's figures in one comparison.
type row struct {
	group, server string
	conc          int
	rps, p50, p99 []float64 // per repetition (µs for latencies)
	rpsRatio      []float64 // to the group's ceiling, per repetition
	p99Ratio      []float64
	ceiling       bool
}

type table struct {
	rows  []*row
	notes []string
}

func (t *table) get(group, server string, conc int, ceiling bool) *row {
	for _, r := range t.rows {
		if r.group == group && r.server == server && r.conc == conc {
			return r
		}
	}
	r := &row{group: group, server: server, conc: conc, ceiling: ceiling}
	t.rows = append(t.rows, r)
	return r
}

func run(o options) error {
	started := time.Now()
	load0 := loadAvg()
	t := &table{}

	stopAuthz, err := benchExtAuthz(o, t)
	if err != nil {
		return fmt.Errorf("ext-authz: %w", err)
	}
	stopAuthz()
	if err := benchListener(o, t); err != nil {
		return fmt.Errorf("listener: %w", err)
	}
	if !o.skipWebhook {
		if err := benchWebhook(o, t); err != nil {
			return fmt.Errorf("webhook: %w", err)
		}
	}
	text := render(o, t, started, load0, loadAvg())
	fmt.Print(text)
	if err := os.MkdirAll(filepath.Dir(o.out), 0o755); err != nil {
		return err
	}
	return os.WriteFile(o.out, []byte(text), 0o644)
}

// --- ext-authz vs always-allow vs OPA ---

func benchExtAuthz(o options, t *table) (func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	binary, err := testenv.BuildBinary("ext-authz")
	if err != nil {
		return cleanup, err
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { _ = env.Stop() })
	kcp := env.Cluster("kcp")
	ctx := context.Background()
	if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNamespace}}); err != nil {
		return cleanup, err
	}
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		return cleanup, err
	}
	reqs := make([]*authv3.CheckRequest, o.runtimes)
	ids := make([]string, o.runtimes)
	domains := make(map[string]string, o.runtimes)
	var mu sync.Mutex
	err = parallel(32, o.runtimes, func(i int) error {
		name := fmt.Sprintf("runtime-%06d", i)
		domain := fmt.Sprintf("skr-%06d.kyma.example.com", i)
		leaf, err := ca.Issue(pki.LeafOptions{CommonName: name, DNSNames: []string{domain, "skr-webhook.kyma-system.svc"}})
		if err != nil {
			return err
		}
		k := extauthz.Kyma(kymaNamespace, name, domain, map[string]string{"operator.kyma-project.io/managed-by": "lifecycle-manager"})
		if err := kcp.Client.Create(ctx, k); err != nil {
			return err
		}
		ids[i] = name
		reqs[i] = extauthz.CheckRequest("lifecycle-manager", map[string]string{
			contract.HeaderXFCC: extauthz.GatewayXFCC(leaf.CertPEM, name, leaf.Cert.DNSNames),
		})
		mu.Lock()
		domains[name] = domain
		mu.Unlock()
		return nil
	})
	if err != nil {
		return cleanup, err
	}
	runtimesFile := filepath.Join(os.TempDir(), fmt.Sprintf("benchcompare-runtimes-%d.json", os.Getpid()))
	raw, _ := json.Marshal(domains)
	if err := os.WriteFile(runtimesFile, raw, 0o600); err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { _ = os.Remove(runtimesFile) })

	p, err := extauthz.Start(binary, io.Discard, time.Minute, "--kubeconfig="+kcp.KubeconfigPath, "--kyma-namespace="+kymaNamespace)
	if err != nil {
		return cleanup, err
	}
	cleanups = append(cleanups, func() { _ = p.Stop(15 * time.Second) })
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx); err != nil {
		return cleanup, err
	}
	servers := []struct {
		name    string
		addr    string
		checkID bool
	}{{name: "always-allow (ceiling)"}, {name: "ext-authz", addr: p.GRPCAddr, checkID: true}, {name: "OPA " + opaVersion() + " (Rego)", checkID: true}}
	for i, kind := range map[int]string{0: "allow", 2: "opa"} {
		addr, stop, err := startServer(kind, runtimesFile)
		if err != nil {
			return cleanup, fmt.Errorf("%s server: %w", kind, err)
		}
		cleanups = append(cleanups, stop)
		servers[i].addr = addr
	}
	clients := make([]authv3.AuthorizationClient, len(servers))
	for i, s := range servers {
		m := &multi{}
		for range 2 { // Envoy keeps a few HTTP/2 connections per gRPC service
			conn, err := grpc.NewClient(s.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				return cleanup, err
			}
			cleanups = append(cleanups, func() { _ = conn.Close() })
			m.cs = append(m.cs, authv3.NewAuthorizationClient(conn))
		}
		clients[i] = m
		// Warm-up: every runtime once (ext-authz decodes each certificate once).
		want := ids
		if !s.checkID {
			want = nil
		}
		if _, err := checkLoad(clients[i], reqs, want, 0, o.runtimes, 16); err != nil {
			return cleanup, fmt.Errorf("%s warm-up: %w", s.name, err)
		}
	}
	for rep := range o.n {
		for _, conc := range []int{16, 64} {
			lat := make([][]time.Duration, len(servers))
			took := make([]time.Duration, len(servers))
			for c := 0; c < o.requests/o.chunk; c++ {
				off := rep*o.requests + c*o.chunk
				for i, s := range servers {
					want := ids
					if !s.checkID {
						want = nil
					}
					t0 := time.Now()
					l, err := checkLoad(clients[i], reqs, want, off, o.chunk, conc)
					if err != nil {
						return cleanup, fmt.Errorf("%s: %w", s.name, err)
					}
					took[i] += time.Since(t0)
					lat[i] = append(lat[i], l...)
				}
			}
			add(t, "ext_authz gRPC", servers[0].name, conc, lat, took, func(i int) string { return servers[i].name })
		}
	}
	rss, _ := p.RSSBytes()
	t.notes = append(t.notes, fmt.Sprintf("ext-authz: %d Kyma CRs, VmRSS %.1f MiB after the run", o.runtimes, float64(rss)/(1<<20)))
	return cleanup, nil
}

// add summarizes one interleaved round; server 0 is the ceiling.
func add(t *table, group, ceilingName string, conc int, lat [][]time.Duration, took []time.Duration, name func(int) string) {
	var c [3]float64
	for i := range lat {
		rps, p50, p99 := summarize(lat[i], took[i])
		if i == 0 {
			c = [3]float64{rps, p50, p99}
		}
		r := t.get(group, name(i), conc, i == 0)
		r.rps, r.p50, r.p99 = append(r.rps, rps), append(r.p50, p50), append(r.p99, p99)
		r.rpsRatio, r.p99Ratio = append(r.rpsRatio, rps/c[0]), append(r.p99Ratio, p99/c[2])
	}
}

func summarize(lat []time.Duration, took time.Duration) (rps, p50, p99 float64) {
	slices.Sort(lat)
	q := func(f float64) float64 { return float64(lat[int(f*float64(len(lat)-1))].Microseconds()) }
	return float64(len(lat)) / took.Seconds(), q(0.50), q(0.99)
}

type multi struct {
	cs []authv3.AuthorizationClient
	n  atomic.Uint64
}

func (m *multi) Check(ctx context.Context, in *authv3.CheckRequest, opts ...grpc.CallOption) (*authv3.CheckResponse, error) {
	return m.cs[m.n.Add(1)%uint64(len(m.cs))].Check(ctx, in, opts...)
}

// checkLoad sends n Checks over conc workers; every answer must be an
// allow (for the request's runtime when ids is given).
func checkLoad(client authv3.AuthorizationClient, reqs []*authv3.CheckRequest, ids []string, offset, n, conc int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var bad atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				r := (offset + i*7919) % len(reqs)
				// The deadline the gateway puts on its ext_authz calls
				// (the provider's timeout in manifests/istio, sent as
				// grpc-timeout), for every server alike.
				ctx, cancel := context.WithTimeout(context.Background(), gatewayAuthzTimeout)
				t0 := time.Now()
				resp, err := client.Check(ctx, reqs[r])
				lat[i] = time.Since(t0)
				cancel()
				if err != nil || resp.GetStatus().GetCode() != int32(codes.OK) {
					bad.Store(fmt.Sprintf("not allowed: %v %v", err, resp.GetStatus()))
				} else if ids != nil && resp.GetOkResponse().GetHeaders()[0].GetHeader().GetValue() != ids[r] {
					bad.Store(fmt.Sprintf("allowed as %v, want %s", resp.GetOkResponse().GetHeaders(), ids[r]))
				}
			}
		}()
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		return nil, fmt.Errorf("%v", v)
	}
	return lat, nil
}

// startServer re-executes this program as an ext_authz server.
func startServer(kind, runtimesFile string) (string, func(), error) {
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), "BENCHCOMPARE_SERVE="+kind, "BENCHCOMPARE_RUNTIMES="+runtimesFile)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop := func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), "ADDR="); ok {
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return addr, stop, nil
		}
	}
	stop()
	return "", nil, fmt.Errorf("%s server did not start", kind)
}

func opaVersion() string {
	if bi, ok := debugBuildInfo(); ok {
		for _, d := range bi {
			if d[0] == "github.com/open-policy-agent/opa" {
				return d[1]
			}
		}
	}
	return ""
}

// --- listener vs bare net/http ---

const watchEvent = `{"watched":{"namespace":"kcp-system","name":"kyma-1"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`

func benchListener(o options, t *table) error {
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		return err
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"skr-a.kyma.example.com"}})
	if err != nil {
		return err
	}
	hdr := http.Header{
		"Content-Type":           {"application/json"},
		contract.HeaderRuntimeID: {"runtime-a"},
		contract.HeaderSKRDomain: {"skr-a.kyma.example.com"},
		contract.HeaderXFCC:      {extauthz.GatewayXFCC(leaf.CertPEM, "runtime-a", leaf.Cert.DNSNames)},
	}
	// The listener, as an operator runs it (identity from ext-authz's header).
	lln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	l, err := listener.New("", "bench-manager", listener.WithNetListener(lln), listener.WithRegisterer(nil), listener.WithLogger(logr.Discard()))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- l.Start(ctx) }()
	go func() {
		for {
			select {
			case <-l.Events():
			case <-ctx.Done():
				return
			}
		}
	}()
	// The ceiling: bare net/http reading the same body and headers.
	bln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	bare := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
			xfcc := r.Header.Get(contract.HeaderXFCC)
			id := r.Header.Get(contract.HeaderRuntimeID)
			if err != nil || len(body) == 0 || xfcc == "" || id == "" {
				w.WriteHeader(http.StatusBadRequest)
				return
			}
			w.WriteHeader(http.StatusOK)
		}),
		ReadHeaderTimeout: listener.DefaultReadHeaderTimeout, ReadTimeout: listener.DefaultReadTimeout,
		WriteTimeout: listener.DefaultWriteTimeout, IdleTimeout: listener.DefaultIdleTimeout,
	}
	go func() { _ = bare.Serve(bln) }()
	defer bare.Close()

	urls := []string{"http://" + bln.Addr().String() + contract.EventPath("bench-manager"), "http://" + lln.Addr().String() + l.Path()}
	names := []string{"bare net/http (ceiling)", "listener"}
	for range o.n {
		for _, conc := range []int{16, 64} {
			clients := make([]*http.Client, len(urls))
			for i := range urls {
				clients[i] = &http.Client{Transport: &http.Transport{MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, DisableCompression: true}, Timeout: 10 * time.Second}
				if _, err := httpLoad(clients[i], urls[i], hdr, conc, conc); err != nil { // open the connections
					return err
				}
			}
			lat := make([][]time.Duration, len(urls))
			took := make([]time.Duration, len(urls))
			for range o.requests / o.chunk {
				for i := range urls {
					t0 := time.Now()
					l, err := httpLoad(clients[i], urls[i], hdr, o.chunk, conc)
					if err != nil {
						return fmt.Errorf("%s: %w", names[i], err)
					}
					took[i] += time.Since(t0)
					lat[i] = append(lat[i], l...)
				}
			}
			for _, c := range clients {
				c.CloseIdleConnections()
			}
			add(t, "events over HTTP", names[0], conc, lat, took, func(i int) string { return names[i] })
		}
	}
	cancel()
	return <-done
}

func httpLoad(client *http.Client, url string, hdr http.Header, n, conc int) ([]time.Duration, error) {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var bad atomic.Value
	var wg sync.WaitGroup
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(watchEvent))
				req.Header = hdr
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
				}
				lat[i] = time.Since(t0)
				if err != nil || resp.StatusCode != http.StatusOK {
					bad.Store(fmt.Sprintf("%v %v", err, resp))
				}
			}
		}()
	}
	wg.Wait()
	if v := bad.Load(); v != nil {
		return nil, fmt.Errorf("a request failed: %v", v)
	}
	return lat, nil
}

// --- webhook admission latency ---

// benchWebhook runs skr-webhook's BenchmarkAdmissionLatency n times (the
// whole wired app over HTTPS against a KCP stub per state) and reads p50,
// p99 and requests/s of each state.
func benchWebhook(o options, t *table) error {
	cmd := exec.Command("go", "test", "-run", "^$", "-bench", "^BenchmarkAdmissionLatency$", "-benchtime", "1x",
		"-count", strconv.Itoa(o.n), "./skr-webhook/")
	cmd.Dir = testenv.RepoRoot()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%v\n%s", err, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		name, ok := strings.CutPrefix(line, "BenchmarkAdmissionLatency/")
		if !ok {
			continue
		}
		f := strings.Fields(name)
		state := f[0][:strings.LastIndex(f[0], "-")]
		metrics := map[string]float64{}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err == nil {
				metrics[f[i+1]] = v
			}
		}
		r := t.get("webhook admission (KCP "+state+")", "skr-webhook", 1, false)
		r.rps = append(r.rps, metrics["requests/s"])
		r.p50 = append(r.p50, metrics["p50-ms"]*1000)
		r.p99 = append(r.p99, metrics["p99-ms"]*1000)
	}
	return nil
}

// --- output ---

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func render(o options, t *table, started time.Time, load0, load1 string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# make bench-compare — %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Machine: %s, %d CPUs (%s), %s; load average %s at start, %s at end. ", cpuModel(), runtime.NumCPU(), runtime.GOARCH, runtime.Version(), load0, load1)
	fmt.Fprintf(&b, "Medians of %d repetitions; %d requests per server, concurrency and repetition, interleaved in chunks of %d; %d runtimes. ", o.n, o.requests, o.chunk, o.runtimes)
	b.WriteString("RPS, p50 and p99 are the medians over the repetitions; the two ratio columns (and the goals) are the median of each repetition's own ratio: the servers of one repetition run interleaved, under the same machine state, so the paired ratio is the comparison (it can differ from the ratio of the medians shown).\n\n")
	b.WriteString("| comparison | conc. | server | RPS | p50 µs | p99 µs | RPS / ceiling | p99 / ceiling | goal | met |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range t.rows {
		goal, met := goalOf(r)
		rr, pr := "–", "–"
		if len(r.rpsRatio) > 0 && !r.ceiling {
			rr, pr = fmt.Sprintf("%.0f %%", 100*median(r.rpsRatio)), fmt.Sprintf("%.2f×", median(r.p99Ratio))
		}
		conc := strconv.Itoa(r.conc)
		if strings.HasPrefix(r.group, "webhook") {
			conc = "1"
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %.0f | %.0f | %.0f | %s | %s | %s | %s |\n", r.group, conc, r.server, median(r.rps), median(r.p50), median(r.p99), rr, pr, goal, met)
	}
	for _, n := range t.notes {
		fmt.Fprintf(&b, "\n%s.", n)
	}
	b.WriteString("\n")
	return b.String()
}

func goalOf(r *row) (string, string) {
	yes := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "**no**"
	}
	switch {
	case r.server == "ext-authz":
		return "≥ 90 %, p99 ≤ 1.1×", yes(median(r.rpsRatio) >= 0.9 && median(r.p99Ratio) <= 1.1)
	case r.server == "listener":
		return "≥ 90 %", yes(median(r.rpsRatio) >= 0.9)
	case r.server == "skr-webhook":
		return "p99 ≤ 5 ms", yes(median(r.p99) <= 5000)
	}
	return "", ""
}

func cpuModel() string {
	raw, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				return strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
			}
		}
	}
	return "unknown CPU"
}

func loadAvg() string {
	raw, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(raw))
	return strings.Join(f[:3], " ")
}

// parallel runs f(0..n-1) on workers goroutines; the first error wins.
func parallel(workers, n int, f func(int) error) error {
	var next atomic.Int64
	var first atomic.Value
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for first.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					first.CompareAndSwap(nil, err)
				}
			}
		}()
	}
	wg.Wait()
	if err, ok := first.Load().(error); ok {
		return err
	}
	return nil
}
