package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// BenchmarkAdmissionManyManagers is the webhook at fleet scale: the SKR
// webhook configuration of a KCP with 1,000 Watchers has 1,000 webhooks,
// one path /validate/<manager> each, and the managers file names all of
// them (each gets a startup resync and heartbeats). Requests go round-robin
// over all the managers' paths, KCP healthy; managers=1 is the same run with
// one manager, for comparison. It reports p50/p99 per review and how many
// managers the webhook knows (a manager beyond --max-managers gets no
// resyncs or heartbeats).
func BenchmarkAdmissionManyManagers(b *testing.B) {
	for _, n := range []int{1, 1000} {
		b.Run(fmt.Sprintf("managers=%d", n), func(b *testing.B) {
			names := make([]string, n)
			for i := range names {
				names[i] = fmt.Sprintf("operator-%04d", i)
			}
			file := filepath.Join(b.TempDir(), "managers")
			if err := os.WriteFile(file, []byte(strings.Join(names, "\n")+"\n"), 0o600); err != nil {
				b.Fatal(err)
			}
			env := startBenchApp(b, kcpstub.Serving, "--managers-file", file)
			base := strings.TrimSuffix(env.url, contract.ValidatePath("lifecycle-manager"))
			urls := make([]string, n)
			for i, m := range names {
				urls[i] = base + contract.ValidatePath(m)
			}
			// The managers file is read at start; wait until the webhook
			// knows all (or its bound refused some) and their startup
			// resyncs are out, so the run measures the steady state.
			deadline := time.Now().Add(time.Minute)
			refusedAtStart := 0.0
			for len(env.app.dispatcher.Managers())+int(refused(b, env)) < n+1 || env.stub.Total() < int64(len(env.app.dispatcher.Managers())) {
				if time.Now().After(deadline) {
					b.Fatalf("managers: %d known, %v refused, %d deliveries", len(env.app.dispatcher.Managers()), refused(b, env), env.stub.Total())
				}
				time.Sleep(10 * time.Millisecond) // polling a benchmark fixture, not a race
			}
			refusedAtStart = refused(b, env)
			bodies := make([][]byte, 5000)
			for i := range bodies {
				bodies[i] = updateReview(i)
			}
			const perIteration = 5000
			b.ResetTimer()
			began := time.Now()
			lat, err := loadgen.Closed(b.N*perIteration, 1, func(i int) error {
				return post(env.client, urls[i%n], bodies[i%len(bodies)])
			})
			elapsed := time.Since(began)
			b.StopTimer()
			if err != nil {
				b.Fatal(err)
			}
			s := loadgen.Summarize(lat, elapsed)
			b.ReportMetric(loadgen.Millis(s.P50), "p50-ms")
			b.ReportMetric(loadgen.Millis(s.P99), "p99-ms")
			b.ReportMetric(s.RPS, "requests/s")
			b.ReportMetric(float64(len(env.app.dispatcher.Managers())), "managers-known")
			// Refusals count every attempt; at start that is one per
			// manager of the file beyond the bound.
			b.ReportMetric(refusedAtStart, "managers-refused-at-start")
		})
	}
}

// refused reads the webhook's count of managers refused by its bound.
func refused(b *testing.B, env *benchApp) float64 {
	b.Helper()
	mfs, err := env.app.registry.Gather()
	if err != nil {
		b.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "runtime_watcher_skr_webhook_managers_refused_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	return 0
}
