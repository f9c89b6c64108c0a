// Command benchcompare is `make bench-compare`: on this machine, in one run,
// it measures the cost of the project's servers against their ceilings
// (docs/architecture.md §3.14), every server in a process of its own, with
// the load harness of test/loadgen (loopback only):
//
//   - ext_authz: the always-allow ceiling, its twin (a second identical
//     process: the run's noise floor), ext-authz (the real binary, N Kyma
//     CRs in a real API server), the same ext-authz with its rate limit per
//     runtime off and an ext_authz server deciding with OPA (a
//     prepared Rego SAN-pinning query over the same runtimes, as
//     opa-envoy-plugin does), Checks over two HTTP/2 connections each (as
//     Envoy keeps them);
//   - events over HTTP: bare net/http (the ceiling reads the body and the
//     same XFCC and runtime-id headers), its twin, the listener and Kyma's
//     own listener (github.com/kyma-project/runtime-watcher/listener, the
//     operator of test/tools/kymalistener: it takes the runtime ID from the
//     certificate in XFCC, as Lifecycle Manager runs it);
//   - the whole edge (issue 32): upstream Envoy (test/envoy's static edge,
//     istiod's listener for the kcp-gateway) without an ext_authz filter
//     (the ceiling), its twin, with an always-allow ext_authz server and
//     its twin (the mechanism's price, issue 42), with ext-authz (SAN
//     pinning) and with OPA as the ext_authz provider, events over mTLS (HTTP/2) to a bare
//     net/http upstream; CPU is Envoy's and the authz server's together;
//   - the skr-webhook's admission latency with the KCP healthy, refusing and
//     blackholed (skr-webhook's BenchmarkAdmissionLatency).
//
// Each comparison runs closed loops at 16 and 64 concurrent requests
// (saturation) and an open loop at a fixed rate, half the ceiling's
// saturated rate of the same repetition. For every server: its own CPU
// time per request (its process's CPU clock read around the chunks it
// answered), p50/p99 and the median latency it adds over the ceiling, and
// RPS (information). Servers of one load get interleaved chunks, so they
// share the machine's state; everything is repeated -n times. The table
// holds medians (ranges for ratios) and loadgen's goals with pass/fail, and
// is written to -out.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const (
	kymaNamespace = "kcp-system"
	groupExtAuthz = "ext_authz gRPC"
	groupListener = "events over HTTP"
	// kindOPA is the server this program can be re-executed as; the
	// others run from loadgen's servers command, built from the product's
	// module (the same grpc-go as ext-authz; this module's OPA needs newer
	// versions).
	kindOPA = "opa"
	// extAuthzLimitOff is ext-authz with --rate-limit-mode=off.
	extAuthzLimitOff = "ext-authz, rate limit off"
	// benchManager is the manager name of the events' path.
	benchManager = "bench-manager"
)

type options struct {
	n, runtimes, requests, chunk int
	out                          string
	skipWebhook                  bool
}

func main() {
	loadgen.ServeIfChild(map[string]loadgen.ServeFunc{kindOPA: serveOPA})
	var o options
	flag.IntVar(&o.n, "n", 5, "repetitions; the table holds the medians")
	flag.IntVar(&o.runtimes, "runtimes", 10000, "Kyma CRs (and client certificates)")
	flag.IntVar(&o.requests, "requests", 20000, "requests per server, load and repetition (OPA: a quarter)")
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

func run(o options) error {
	started := time.Now()
	load0 := loadAvg()
	t := &table{}

	servers, err := testenv.BuildBinary("test/loadgen/servers")
	if err != nil {
		return err
	}
	authz, stopAuthz, err := setupExtAuthz(o, servers)
	if err != nil {
		stopAuthz()
		return fmt.Errorf("ext-authz: %w", err)
	}
	events, stopEvents, err := setupListener(servers)
	if err != nil {
		stopAuthz()
		stopEvents()
		return fmt.Errorf("listener: %w", err)
	}
	edge, stopEdge, err := setupEdge(servers)
	if err != nil {
		stopAuthz()
		stopEvents()
		stopEdge()
		return fmt.Errorf("edge: %w", err)
	}
	// The repetitions alternate the comparisons, so a change in the
	// machine's load meets both.
	for rep := range o.n {
		for _, c := range []*comparison{authz, events, edge} {
			if err := runRepetition(o, c, t, rep); err != nil {
				stopAuthz()
				stopEvents()
				stopEdge()
				return err
			}
		}
		fmt.Fprintf(os.Stderr, "benchcompare: repetition %d of %d done after %s\n", rep+1, o.n, seconds(time.Since(started)))
	}
	t.notes = append(t.notes, authzNote())
	stopEdge()
	stopAuthz()
	stopEvents()
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

// --- ext-authz vs always-allow (and its twin) vs OPA ---

// authzNote reports ext-authz's memory after the run; set by setupExtAuthz.
var authzNote = func() string { return "" }

func setupExtAuthz(o options, serversBinary string) (*comparison, func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	binary, err := testenv.BuildBinary("ext-authz")
	if err != nil {
		return nil, cleanup, err
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = env.Stop() })
	kcp := env.Cluster("kcp")
	ctx := context.Background()
	// The fixture's own client is not rate-limited client-side.
	fastCfg := rest.CopyConfig(kcp.Config)
	fastCfg.QPS, fastCfg.Burst = -1, 0
	fast, err := client.New(fastCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return nil, cleanup, err
	}
	if err := fast.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNamespace}}); err != nil {
		return nil, cleanup, err
	}
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		return nil, cleanup, err
	}
	fleet, err := extauthz.CreateFleet(ctx, fast, ca, kymaNamespace, o.runtimes, 32)
	if err != nil {
		return nil, cleanup, err
	}
	domains := make(map[string]string, o.runtimes)
	for i, id := range fleet.IDs {
		domains[id] = fleet.Domains[i]
	}
	runtimesFile := filepath.Join(os.TempDir(), fmt.Sprintf("benchcompare-runtimes-%d.json", os.Getpid()))
	raw, _ := json.Marshal(domains)
	if err := os.WriteFile(runtimesFile, raw, 0o600); err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = os.Remove(runtimesFile) })

	// The rate limit per runtime runs (its cost is what the ext_authz
	// comparison shows), with a limit no load reaches: the edge's loads
	// send every event with one runtime's certificate, far above the
	// default of 100/s.
	p, err := extauthz.Start(binary, io.Discard, time.Minute, "--kubeconfig="+kcp.KubeconfigPath, "--kyma-namespace="+kymaNamespace, "--rate-limit=1000000/1000000")
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = p.Stop(15 * time.Second) })
	wctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := p.WaitReady(wctx); err != nil {
		return nil, cleanup, err
	}
	pid := p.Cmd.Process.Pid
	// The same binary without its rate limit per runtime (issue 42): what
	// the limiter costs per Check. The loads spread over every runtime, so
	// none reaches its limit: every Check is allowed by both.
	off, err := extauthz.Start(binary, io.Discard, time.Minute, "--kubeconfig="+kcp.KubeconfigPath, "--kyma-namespace="+kymaNamespace, "--rate-limit-mode=off")
	if err != nil {
		return nil, cleanup, err
	}
	cleanups = append(cleanups, func() { _ = off.Stop(15 * time.Second) })
	if err := off.WaitReady(wctx); err != nil {
		return nil, cleanup, err
	}
	offPID := off.Cmd.Process.Pid
	edgeAuthz.ca, edgeAuthz.extAuthzAddr = ca, p.GRPCAddr
	edgeAuthz.extAuthzCPU = func() (time.Duration, error) { return loadgen.ProcessCPU(pid) }
	edgeAuthz.runtimeID, edgeAuthz.domain = fleet.IDs[0], fleet.Domains[0]
	authzNote = func() string {
		rss, _ := p.RSSBytes()
		hwm, _ := testenv.ProcStatus(pid, "VmHWM")
		return fmt.Sprintf("ext-authz: %d Kyma CRs, VmRSS %.1f MiB, VmHWM %.1f MiB after the run", o.runtimes, float64(rss)/(1<<20), float64(hwm)/(1<<20))
	}

	c := &comparison{group: groupExtAuthz, conns: []int{16, 64}}
	addrs := []string{"", "", p.GRPCAddr, off.GRPCAddr, ""}
	c.servers = []server{
		{name: "always-allow (ceiling)", role: roleCeiling},
		{name: "always-allow (twin)", role: roleTwin},
		{name: "ext-authz", cpu: func() (time.Duration, error) { return loadgen.ProcessCPU(pid) }},
		{name: extAuthzLimitOff, role: rolePeer, cpu: func() (time.Duration, error) { return loadgen.ProcessCPU(offPID) }},
		// OPA with 64 Checks in flight on 2 cores queues past the gateway's
		// 500 ms: make bench-compare failed three times on one
		// DeadlineExceeded (at load average 3 and 20-27). What its row
		// measures, CPU per Check, does not depend on the deadline; its
		// closed-loop latency then includes that queue.
		{name: "OPA " + opaVersion() + " (Rego)", role: rolePeer, everyNth: 4, closedOnly: true, deadline: 5 * time.Second},
	}
	for i, kind := range map[int]string{0: loadgen.KindAlwaysAllow, 1: loadgen.KindAlwaysAllow, 4: kindOPA} {
		binary := serversBinary
		if kind == kindOPA {
			binary = os.Args[0]
		}
		child, err := loadgen.StartServer(binary, kind, runtimesFile)
		if err != nil {
			return nil, cleanup, fmt.Errorf("%s server: %w", kind, err)
		}
		cleanups = append(cleanups, func() { _ = child.Stop() })
		addrs[i], c.servers[i].cpu = child.Addr, child.CPU
		if kind == kindOPA {
			edgeAuthz.opaAddr, edgeAuthz.opaCPU = child.Addr, child.CPU
		} else {
			edgeAuthz.allowAddr[i], edgeAuthz.allowCPU[i] = child.Addr, child.CPU
		}
	}
	checkers := make([]*loadgen.Checker, len(addrs))
	for i, addr := range addrs {
		if checkers[i], err = loadgen.DialChecker(addr, 2); err != nil {
			return nil, cleanup, err
		}
		cleanups = append(cleanups, func() { _ = checkers[i].Close() })
	}
	want := func(s, r int) string {
		if c.servers[s].role == roleCeiling || c.servers[s].role == roleTwin {
			return "" // the ceiling allows without looking
		}
		return fleet.IDs[r]
	}
	c.send = func(s int, _ string, offset, i int) error {
		r := loadgen.Spread(offset, i, o.runtimes)
		if d := c.servers[s].deadline; d > 0 {
			return checkers[s].CheckWithin(fleet.Requests[r], want(s, r), d)
		}
		return checkers[s].Check(fleet.Requests[r], want(s, r))
	}
	// Warm-up: every runtime once to every server (ext-authz decodes each
	// certificate once; the measured loads answer from its cache), without
	// the gateway's deadline (first requests initialize a server).
	for s := range c.servers {
		if _, err := loadgen.Closed(o.runtimes, 16, func(i int) error {
			return checkers[s].CheckWithin(fleet.Requests[i], want(s, i), time.Minute)
		}); err != nil {
			return nil, cleanup, fmt.Errorf("%s warm-up: %w", c.servers[s].name, err)
		}
	}
	return c, cleanup, nil
}

// --- listener vs bare net/http (and its twin) vs Kyma's listener ---

func setupListener(serversBinary string) (*comparison, func(), error) {
	var cleanups []func()
	cleanup := func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}
	ca, err := pki.NewCA("bench-ca")
	if err != nil {
		return nil, cleanup, err
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-a", DNSNames: []string{"skr-a.kyma.example.com"}})
	if err != nil {
		return nil, cleanup, err
	}
	hdr := http.Header{
		"Content-Type":           {"application/json"},
		contract.HeaderRuntimeID: {"runtime-a"},
		contract.HeaderSKRDomain: {"skr-a.kyma.example.com"},
		contract.HeaderXFCC:      {extauthz.GatewayXFCC(leaf.CertPEM, "runtime-a", leaf.Cert.DNSNames)},
	}
	c := &comparison{group: groupListener, conns: []int{16, 64}}
	c.servers = []server{
		{name: "bare net/http (ceiling)", role: roleCeiling},
		{name: "bare net/http (twin)", role: roleTwin},
		{name: "listener"},
		{name: "Kyma's listener " + kymaListenerVersion(), role: rolePeer},
	}
	posters := map[string][]*loadgen.Poster{}
	for i, kind := range []string{loadgen.KindBareHTTP, loadgen.KindBareHTTP, loadgen.KindListener, kindKymaListener} {
		var addr string
		if kind == kindKymaListener {
			k, err := startKymaListener(benchManager)
			if err != nil {
				return nil, cleanup, fmt.Errorf("kyma-listener server: %w", err)
			}
			cleanups = append(cleanups, func() { _ = k.stop() })
			addr, c.servers[i].cpu = k.addr, k.cpu
		} else {
			child, err := loadgen.StartServer(serversBinary, kind, benchManager)
			if err != nil {
				return nil, cleanup, fmt.Errorf("%s server: %w", kind, err)
			}
			cleanups = append(cleanups, func() { _ = child.Stop() })
			addr, c.servers[i].cpu = child.Addr, child.CPU
		}
		url := "http://" + addr + contract.EventPath(benchManager)
		for _, conc := range c.conns {
			posters[closedLoad(conc)] = append(posters[closedLoad(conc)], loadgen.NewPoster(url, hdr, []byte(loadgen.WatchEvent), conc))
		}
		posters[openLoad] = append(posters[openLoad], loadgen.NewPoster(url, hdr, []byte(loadgen.WatchEvent), maxInFlight))
	}
	for _, ps := range posters {
		for _, p := range ps {
			cleanups = append(cleanups, p.Close)
		}
	}
	c.send = func(s int, load string, _, _ int) error { return posters[load][s].Post() }
	// Warm-up: open the connections of every load.
	for _, conc := range c.conns {
		for s := range c.servers {
			if _, err := loadgen.Closed(conc*4, conc, func(int) error { return c.send(s, closedLoad(conc), 0, 0) }); err != nil {
				return nil, cleanup, fmt.Errorf("%s warm-up: %w", c.servers[s].name, err)
			}
		}
	}
	return c, cleanup, nil
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
		r := t.get("webhook admission (KCP "+state+")", "closed, 1 conc.", "skr-webhook", "")
		r.rps = append(r.rps, metrics["requests/s"])
		r.p50 = append(r.p50, metrics["p50-ms"]*1000)
		r.p99 = append(r.p99, metrics["p99-ms"]*1000)
	}
	return nil
}

// --- output ---

func render(o options, t *table, started time.Time, load0, load1 string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "### make bench-compare — %s\n\n", started.UTC().Format(time.RFC3339))
	fmt.Fprintf(&b, "Command: `make bench-compare BENCH_COMPARE_N=%d` (`benchcompare %s`) at commit %s. ", o.n, strings.Join(os.Args[1:], " "), commit())
	fmt.Fprintf(&b, "Machine: %s, %d CPUs (%s), %s; load average %s at start, %s at end; took %s.\n\n", cpuModel(), runtime.NumCPU(), runtime.GOARCH, runtime.Version(), load0, load1, seconds(time.Since(started)))
	fmt.Fprintf(&b, "%d repetitions; per repetition, server and load %d requests (OPA: every fourth chunk) in interleaved chunks of %d, the order rotating each round; %d runtimes. ", o.n, o.requests, o.chunk, o.runtimes)
	b.WriteString("Every server runs in a process of its own. CPU µs / request is the server process's own CPU clock (user + system time of all its threads) read before and after each of its chunks, over the requests of those chunks. Ratios are paired per repetition with the ceiling of the same interleaved rounds; a ratio cell is the median and (range) over the repetitions; the twin is a second, identical ceiling process, so its ratio is this run's noise floor. Other columns are medians over the repetitions. Closed loop: N senders, each sending when its last answer came (saturation); open loop: a fixed offered rate, half the ceiling's saturated rate of the same repetition. RPS is information, not a goal.\n\n")
	b.WriteString("Goals (test/loadgen/goals.go):\n\n")
	goalList(&b)
	b.WriteString("\n")
	met, all := t.render(&b)
	fmt.Fprintf(&b, "\nGoals met: %d of %d.", met, all)
	for _, n := range t.notes {
		if n != "" {
			fmt.Fprintf(&b, " %s.", n)
		}
	}
	b.WriteString("\n")
	return b.String()
}

// commit is the repository's HEAD, marked when the tree has changes.
func commit() string {
	root := testenv.RepoRoot()
	head, err := exec.Command("git", "-C", root, "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(head))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(bytes.TrimSpace(st)) > 0 {
		c += " + uncommitted changes"
	}
	return c
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
