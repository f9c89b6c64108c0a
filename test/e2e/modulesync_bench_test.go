package e2e_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
)

// BenchmarkModuleRoundTrip brings up the local system and edits the demo
// Module CR in the SKR 200 times, one at a time, and reports the time from
// the start of each edit to the ModuleConfig in the KCP mirroring it
// (kcp-p50/p99) and to the object the example module manager derives from
// it changing in the SKR (p50/p99-ms: SKR → module-sync → ModuleConfig →
// module manager → SyncResource → module-sync → SKR). Edits are at least
// 1.1 s apart: the skr-webhook delivers one object at most once per
// --object-interval (1 s), and this measures the path, not that throttle.
func BenchmarkModuleRoundTrip(b *testing.B) {
	for range b.N {
		benchModuleRoundTrip(b, 200)
	}
}

func benchModuleRoundTrip(b *testing.B, edits int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "runtime-watcher-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	sys, err := localenv.Start(ctx, localenv.Options{Dir: dir, Log: zap.New(zap.WriteTo(nopWriter{}))})
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		if err := sys.Stop(); err != nil {
			b.Error(err)
		}
	}()
	obs, err := sys.WatchModuleLoop(ctx)
	if err != nil {
		b.Fatal(err)
	}
	wait := func(greeting string) (kcp, skr time.Time, err error) {
		timeout := time.After(30 * time.Second)
		for skr.IsZero() {
			select {
			case o := <-obs:
				if o.Greeting != greeting {
					continue
				}
				if o.Where == "kcp" {
					kcp = o.Time
				} else {
					skr = o.Time
				}
			case <-timeout:
				return kcp, skr, fmt.Errorf("greeting %s did not reach the SKR object in 30 s", greeting)
			}
		}
		return kcp, skr, nil
	}
	if _, err := sys.SetSampleGreeting(ctx, "warm-up", 1); err != nil {
		b.Fatal(err)
	}
	if _, _, err := wait("warm-up"); err != nil {
		b.Fatal(err)
	}
	var toKCP, roundTrip []time.Duration
	last := time.Now()
	for i := range edits {
		time.Sleep(time.Until(last.Add(1100 * time.Millisecond))) // pacing (see above), not a wait for a result
		greeting := fmt.Sprintf("bench-%d", i)
		at, err := sys.SetSampleGreeting(ctx, greeting, int64(i%3+1))
		if err != nil {
			b.Fatal(err)
		}
		last = at
		kcp, skr, err := wait(greeting)
		if err != nil {
			b.Fatal(err)
		}
		if !kcp.IsZero() {
			toKCP = append(toKCP, kcp.Sub(at))
		}
		roundTrip = append(roundTrip, skr.Sub(at))
	}
	slices.Sort(toKCP)
	slices.Sort(roundTrip)
	pct := func(d []time.Duration, p float64) float64 { return loadgen.Millis(loadgen.Percentile(d, p)) }
	b.ReportMetric(pct(roundTrip, 0.5), "p50-ms")
	b.ReportMetric(pct(roundTrip, 0.99), "p99-ms")
	b.ReportMetric(pct(roundTrip, 1), "max-ms")
	if len(toKCP) > 0 {
		b.ReportMetric(pct(toKCP, 0.5), "kcp-p50-ms")
		b.ReportMetric(pct(toKCP, 0.99), "kcp-p99-ms")
	}
	b.Logf("%d edits: SKR → SKR p50 %.1f ms, p99 %.1f ms, max %.1f ms; SKR → ModuleConfig (%d seen) p50 %.1f ms, p99 %.1f ms",
		len(roundTrip), pct(roundTrip, 0.5), pct(roundTrip, 0.99), pct(roundTrip, 1), len(toKCP), pct(toKCP, 0.5), pct(toKCP, 0.99))
}
