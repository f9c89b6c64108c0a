package ratelimit_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
)

// BenchmarkMemory is the heap one bucket costs: 100,000 runtimes with
// UUID-long IDs, each with one request (a bucket that is not full), at the
// default bound; reported as bytes/runtime (the strings of the IDs
// included).
func BenchmarkMemory(b *testing.B) {
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-1111-2222-3333-%012x", i, i)
	}
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		l := newLimiter(b, ratelimit.Config{Default: ratelimit.Limit{Rate: ratelimit.DefaultRate, Burst: ratelimit.DefaultBurst}})
		now := time.Now()
		for _, id := range ids {
			l.Allow(id, "", now)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		if l.Len() != n {
			b.Fatalf("Len %d", l.Len())
		}
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/n, "bytes/runtime")
		runtime.KeepAlive(l)
	}
}

// BenchmarkAllow is one decision of a runtime with a bucket, among 10,000
// runtimes: what the limiter adds to a Check. "serial": one goroutine;
// "parallel": from GOMAXPROCS goroutines (Checks run on many).
func BenchmarkAllow(b *testing.B) {
	l := newLimiter(b, ratelimit.Config{Default: ratelimit.Limit{Rate: ratelimit.MaxRate, Burst: ratelimit.MaxBurst}})
	ids := make([]string, 10_000)
	for i := range ids {
		ids[i] = fmt.Sprintf("%08x-1111-2222-3333-%012x", i, i)
	}
	now := time.Now()
	b.Run("serial", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			l.Allow(ids[i%len(ids)], "", now)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				l.Allow(ids[i%len(ids)], "", now)
				i++
			}
		})
	})
}
