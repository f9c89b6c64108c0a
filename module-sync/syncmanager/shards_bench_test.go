package syncmanager

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/shardaudit"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var (
	benchRuntimes = flag.Int("shardsbench.runtimes", 400, "runtimes of BenchmarkShards")
	// benchLease is the replicas' Lease: the default.
	benchLease    = shards.DefaultLeaseDuration
	benchProfiles = flag.String("shardsbench.profiles", "", "directory for each process's heap profile (after the change, before the drift pass); empty: none")
)

// BenchmarkShards: module-sync over -shardsbench.runtimes runtimes (one
// SyncResource with one ConfigMap each; every runtime's kubeconfig points
// at one real SKR API server, real KCP API server), once as one process
// and once as 4 processes with --shard-identity, each on fresh API
// servers. Per run: the first convergence, a change of every SyncResource
// (steady state), a drift pass of every SyncResource (the second pass:
// KCP writes, which must be 0), and with shards a replica SIGKILLed (the
// re-own: until the survivors' runtime_watcher_shard_owned_runtimes add
// up to every runtime) followed by a change of every SyncResource (until
// every runtime converged again). Per process: KCP writes (from the KCP's audit
// log: the user agent names the replica), CPU time (utime + stime) and
// VmHWM. Reported per run: the single process's figures and, for the
// shards, the largest replica's and its ratio to a quarter of the single
// process's (1.0 is a perfect share).
func BenchmarkShards(b *testing.B) {
	for range b.N {
		one := shardRun(b, *benchRuntimes, 0)
		four := shardRun(b, *benchRuntimes, 4)
		b.ReportMetric(one.first.Seconds(), "s-first-1proc")
		b.ReportMetric(four.first.Seconds(), "s-first-4shards")
		b.ReportMetric(one.change.Seconds(), "s-change-1proc")
		b.ReportMetric(four.change.Seconds(), "s-change-4shards")
		b.ReportMetric(four.reown.Seconds(), "s-reown-after-kill")
		b.ReportMetric(four.changeAfterKill.Seconds(), "s-change-after-reown")
		b.ReportMetric(float64(one.secondPassWrites+four.secondPassWrites), "second-pass-kcp-writes")
		w1, c1, m1 := one.replicas[0].writes, one.replicas[0].cpu, one.replicas[0].hwm
		var wMax, cMax, mMax float64
		for _, r := range four.replicas {
			wMax, cMax, mMax = max(wMax, r.writes), max(cMax, r.cpu.Seconds()), max(mMax, float64(r.hwm))
		}
		b.ReportMetric(w1, "kcp-writes-1proc")
		b.ReportMetric(wMax, "kcp-writes-max-shard")
		b.ReportMetric(wMax/(w1/4), "writes-max-shard/quarter")
		b.ReportMetric(c1.Seconds(), "cpu-s-1proc")
		b.ReportMetric(cMax, "cpu-s-max-shard")
		b.ReportMetric(cMax/(c1.Seconds()/4), "cpu-max-shard/quarter")
		b.ReportMetric(float64(m1)/(1<<20), "VmHWM-MiB-1proc")
		b.ReportMetric(mMax/(1<<20), "VmHWM-MiB-max-shard")
		b.ReportMetric(mMax/(float64(m1)/4), "VmHWM-max-shard/quarter")
		b.Logf("largest replica / quarter of one process: writes %.2f, CPU %.2f, VmHWM %.2f", wMax/(w1/4), cMax/(c1.Seconds()/4), mMax/(float64(m1)/4))
		if one.secondPassWrites+four.secondPassWrites != 0 {
			b.Errorf("the second pass wrote %d (one process) and %d (shards) times to the KCP, want 0", one.secondPassWrites, four.secondPassWrites)
		}
		if four.reown > 30*time.Second {
			b.Errorf("a killed replica's runtimes were re-owned after %s, more than 30 s", four.reown)
		}
	}
}

type shardRunResult struct {
	first, change, reown, changeAfterKill time.Duration
	secondPassWrites                      int
	replicas                              []replicaCost
}

type replicaCost struct {
	id     string
	writes float64
	cpu    time.Duration
	hwm    int64
}

// shardRun runs n runtimes with one process (shards 0) or shards replicas.
func shardRun(b *testing.B, n, shards int) shardRunResult {
	f := newFleet(b, n, 1)
	var res shardRunResult
	ids := []string{""}
	if shards > 0 {
		ids = nil
		for i := range shards {
			ids = append(ids, fmt.Sprintf("bench-%d", i))
		}
	}
	drift := 20 * time.Second
	metrics := map[string]string{}
	pids := map[string]int{}
	pprofs := map[string]string{}
	began := time.Now()
	for _, id := range ids {
		addr := testenv.FreeAddr()
		metrics[id] = "http://" + addr + "/metrics"
		pprofs[id] = testenv.FreeAddr()
		// The drift pass is the second pass; the first and the change
		// converge long before it is due.
		args := []string{"--metrics-bind-address", addr, "--pprof-bind-address", pprofs[id], "--drift-interval", drift.String()}
		if id != "" {
			// The default Lease (TestShards' 3 s Leases lapse on a
			// loaded machine: members drop out and their runtimes move
			// in the middle of a convergence), which the 30 s
			// re-own is about.
			args = append(args, "--shard-lease-duration", benchLease.String())
		}
		pids[id] = f.start(id, args...).Process.Pid
	}
	res.first = f.converge("first convergence", "v1", 10*time.Minute)
	f.bump("v2")
	res.change = f.converge("a change of every SyncResource", "v2", 5*time.Minute)
	// Per-process cost of the two, before the drift pass.
	for _, id := range ids {
		c := replicaCost{id: id}
		var err error
		if c.cpu, err = loadgen.ProcessCPU(pids[id]); err != nil {
			b.Fatal(err)
		}
		if c.hwm, err = testenv.ProcStatus(pids[id], "VmHWM"); err != nil {
			b.Fatal(err)
		}
		res.replicas = append(res.replicas, c)
		if *benchProfiles != "" {
			name := id
			if name == "" {
				name = "one"
			}
			saveHeapProfile(b, "http://"+pprofs[id]+"/debug/pprof/heap?gc=1",
				filepath.Join(*benchProfiles, fmt.Sprintf("heap-%d-%s.pb.gz", n, name)))
		}
	}
	// The second pass: every SyncResource's drift pass, counted by the
	// processes' own metric; it must write nothing to the KCP.
	applied := func() float64 {
		sum := 0.0
		for _, id := range ids {
			text, err := promtext.Fetch(f.ctx, metrics[id])
			if err != nil {
				return -1
			}
			v, _ := promtext.Sum(text, "runtime_watcher_module_sync_syncresource_reconciles_total", map[string]string{"result": "applied"})
			sum += v
		}
		return sum
	}
	secondFrom := time.Now()
	before := applied()
	// Due after drift (+10 % jitter); the passes themselves take their time
	// on a loaded machine.
	f.g.Eventually(applied).WithTimeout(drift+10*time.Minute).WithPolling(500*time.Millisecond).Should(gomega.BeNumerically(">=", before+float64(n)), "every SyncResource's drift pass")
	secondTo := time.Now()
	writes := auditWrites(b, f.kcp.AuditLogPath)
	for i := range res.replicas {
		for _, w := range writes[res.replicas[i].id] {
			if w.Before(secondFrom) {
				res.replicas[i].writes++
			} else if w.Before(secondTo) {
				res.secondPassWrites++
			}
		}
	}
	if shards > 0 {
		f.stop(ids[0], syscall.SIGKILL)
		killed := time.Now()
		// Re-owned: the survivors' own count of the runtimes they own
		// (runtime_watcher_shard_owned_runtimes) covers every runtime.
		owned := func() float64 {
			sum := 0.0
			for _, id := range ids[1:] {
				text, err := promtext.Fetch(f.ctx, metrics[id])
				if err != nil {
					return -1
				}
				v, _ := promtext.Sum(text, "runtime_watcher_shard_owned_runtimes", map[string]string{"member": id})
				sum += v
			}
			return sum
		}
		f.g.Eventually(owned).WithTimeout(2*time.Minute).WithPolling(100*time.Millisecond).Should(gomega.BeNumerically("==", n), "the killed replica's runtimes re-owned")
		res.reown = time.Since(killed)
		// Then a change of every SyncResource: the moved runtimes' first
		// passes on their new owners (their clients, RBAC and policy
		// probe) are in it.
		bumped := time.Now()
		f.bump("v3")
		f.converge("a change after a replica was SIGKILLed", "v3", 10*time.Minute)
		res.changeAfterKill = time.Since(bumped)
	}
	b.Logf("%d runtimes, %d shards: first convergence %s, change %s, second pass %s, re-owned %s after SIGKILL, then a change %s (total %s)",
		n, shards, res.first.Round(time.Millisecond), res.change.Round(time.Millisecond), secondTo.Sub(secondFrom).Round(time.Second),
		res.reown.Round(time.Millisecond), res.changeAfterKill.Round(time.Millisecond), time.Since(began).Round(time.Second))
	// Done with this fleet: its processes' drift passes would load the
	// next run.
	for name := range f.replicas {
		f.stop(name, syscall.SIGKILL)
	}
	for _, r := range res.replicas {
		b.Logf("%d runtimes, %d shards: process %q: %.0f KCP writes, CPU %s, VmHWM %.1f MiB", n, shards, r.id, r.writes, r.cpu.Round(time.Millisecond), float64(r.hwm)/(1<<20))
	}
	return res
}

// saveHeapProfile writes a process's heap profile (after a GC) to path.
func saveHeapProfile(b *testing.B, url, path string) {
	resp, err := http.Get(url) //nolint:noctx // a benchmark's one request to its own child process
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b.Fatalf("%s: %s", url, resp.Status)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		b.Fatal(err)
	}
	out, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer out.Close()
	if _, err := io.Copy(out, resp.Body); err != nil {
		b.Fatal(err)
	}
}

// auditWrites are the KCP writes of SyncResources by module-sync, by
// replica ("" for the one process without shards), when received.
func auditWrites(b *testing.B, path string) map[string][]time.Time {
	fh, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	out := map[string][]time.Time{}
	sc := bufio.NewScanner(fh)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e shardaudit.Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			b.Fatal(err)
		}
		if e.Stage != "ResponseComplete" || e.ResponseStatus.Code/100 != 2 || e.ObjectRef.Resource != "syncresources" ||
			(e.UserAgent != "module-sync" && !strings.HasPrefix(e.UserAgent, "module-sync/")) {
			continue
		}
		id := ""
		if i := strings.Index(e.UserAgent, " shard/"); i >= 0 {
			id = e.UserAgent[i+len(" shard/"):]
		}
		out[id] = append(out[id], e.RequestReceived.Time)
	}
	if err := sc.Err(); err != nil {
		b.Fatal(err)
	}
	return out
}
