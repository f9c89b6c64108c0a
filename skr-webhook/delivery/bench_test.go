package delivery

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
)

// BenchmarkDeliveryThroughput delivers 20,000 distinct events per iteration
// through the dispatcher (16 workers, one HTTP/2 mTLS connection) to a local
// KCP stub that requires and verifies client certificates. Target: ≥ 5,000
// events/s.
func BenchmarkDeliveryThroughput(b *testing.B) {
	k := startKCP(b, kcpstub.Options{CountOnly: true})
	certs := &swappable{}
	certs.set(b, k.client)
	_, s := newSender(b, k, certs, 5*time.Second)
	const perIteration = 20000
	n := b.N * perIteration
	keys := make([]Key, n)
	for i := range keys {
		keys[i] = key(fmt.Sprint("obj-", i))
	}
	// Warm the connection so the handshake is not measured.
	if r := s.Send(context.Background(), "m", watch("warm")); r.Outcome != Delivered {
		b.Fatal(r)
	}
	reg := prometheus.NewRegistry()
	d := New(Config{QueueSize: n, Registerer: reg}, s, logr.Discard())
	d.Start()
	b.ResetTimer()
	start := time.Now()
	for _, k := range keys {
		d.Enqueue(k.Manager, k.Event())
	}
	tick := time.NewTicker(time.Millisecond) // poll without taking a core from the workers
	for k.stub.Total() < int64(n)+1 {
		<-tick.C
	}
	tick.Stop()
	elapsed := time.Since(start)
	b.StopTimer()
	if err := d.Shutdown(context.Background()); err != nil {
		b.Fatal(err)
	}
	if got := metric(b, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropOverflow); got != 0 {
		b.Fatalf("%v dropped", got)
	}
	if got := metric(b, reg, "runtime_watcher_skr_webhook_events_delivered_total"); got != float64(n) {
		b.Fatalf("delivered %v, want %d", got, n)
	}
	b.ReportMetric(float64(n)/elapsed.Seconds(), "events/s")
}

// BenchmarkBurstMemory enqueues a burst of 100,000 distinct objects while
// the KCP is blackholed (nothing drains) into a queue of 10,000 and reports
// the heap in use afterwards; it stays bounded by the queue size.
func BenchmarkBurstMemory(b *testing.B) {
	const burst, size = 100000, 10000
	k := startKCP(b, kcpstub.Options{CountOnly: true})
	certs := &swappable{}
	certs.set(b, k.client)
	if err := k.stub.SetMode(kcpstub.Blackholed); err != nil {
		b.Fatal(err)
	}
	_, s := newSender(b, k, certs, time.Second)
	var heapMiB, baseMiB float64
	for i := 0; i < b.N; i++ {
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		reg := prometheus.NewRegistry()
		d := New(Config{QueueSize: size, Registerer: reg}, s, logr.Discard())
		d.Start()
		for j := 0; j < burst; j++ {
			kk := key(fmt.Sprint("burst-", j))
			d.Enqueue(kk.Manager, kk.Event())
		}
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		if depth := d.Depth(); depth > size {
			b.Fatalf("depth %d over the queue size", depth)
		}
		if held := d.queue.Len(); held > size+16 {
			b.Fatalf("%d entries held", held)
		}
		dropped := metric(b, reg, "runtime_watcher_skr_webhook_events_dropped_total", "reason", DropOverflow)
		if dropped < burst-size-16 {
			b.Fatalf("dropped %v", dropped)
		}
		heapMiB = float64(after.HeapInuse) / (1 << 20)
		baseMiB = float64(before.HeapInuse) / (1 << 20)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
		_ = d.Shutdown(ctx)
		cancel()
	}
	b.ReportMetric(heapMiB, "heap-inuse-MiB")
	b.ReportMetric(heapMiB-baseMiB, "heap-growth-MiB")
}

// BenchmarkDeliveryWithFailures delivers 20,000 distinct events per
// iteration to a KCP stub that answers 503 to a random 1 % or 10 % of the
// attempts (default retry settings: 200 ms first delay, doubling, jitter),
// and reports events/s until every event is delivered.
func BenchmarkDeliveryWithFailures(b *testing.B) {
	for _, p := range []float64{0.01, 0.10} {
		b.Run(fmt.Sprintf("%g%%-503", p*100), func(b *testing.B) {
			k := startKCP(b, kcpstub.Options{CountOnly: true, Status: func(string, contract.WatchEvent) int {
				if rand.Float64() < p {
					return http.StatusServiceUnavailable
				}
				return 0
			}})
			certs := &swappable{}
			certs.set(b, k.client)
			_, s := newSender(b, k, certs, 5*time.Second)
			const perIteration = 20000
			var total time.Duration
			for i := 0; i < b.N; i++ {
				reg := prometheus.NewRegistry()
				d := New(Config{QueueSize: perIteration, Registerer: reg}, s, logr.Discard())
				d.Start()
				start := time.Now()
				for j := range perIteration {
					kk := key(fmt.Sprint("obj-", i, "-", j))
					d.Enqueue(kk.Manager, kk.Event())
				}
				tick := time.NewTicker(time.Millisecond)
				// Poll the counter itself: a full Gather every millisecond
				// would scan the queue for the oldest-age gauge.
				for testutil.ToFloat64(d.metrics.delivered) < perIteration {
					<-tick.C
				}
				tick.Stop()
				total += time.Since(start)
				if err := d.Shutdown(context.Background()); err != nil {
					b.Fatal(err)
				}
				if got := testutil.ToFloat64(d.metrics.retried); got == 0 {
					b.Fatal("no answer failed")
				}
			}
			b.ReportMetric(float64(b.N*perIteration)/total.Seconds(), "events/s")
		})
	}
}

// BenchmarkRecovery holds 10,000 distinct objects pending while the KCP
// refuses connections (every one has failed at least once and waits for its
// backoff, default settings), then brings the KCP back and reports the time
// until the queue is empty.
func BenchmarkRecovery(b *testing.B) {
	const pending = 10000
	k := startKCP(b, kcpstub.Options{CountOnly: true})
	certs := &swappable{}
	certs.set(b, k.client)
	_, s := newSender(b, k, certs, 5*time.Second)
	var total time.Duration
	for i := 0; i < b.N; i++ {
		if err := k.stub.SetMode(kcpstub.Refusing); err != nil {
			b.Fatal(err)
		}
		d := New(Config{QueueSize: pending}, s, logr.Discard())
		d.Start()
		for j := range pending {
			kk := key(fmt.Sprint("rec-", i, "-", j))
			d.Enqueue(kk.Manager, kk.Event())
		}
		tick := time.NewTicker(time.Millisecond)
		for testutil.ToFloat64(d.metrics.retried) < pending {
			<-tick.C
		}
		if err := k.stub.SetMode(kcpstub.Serving); err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		for d.Depth() > 0 || testutil.ToFloat64(d.metrics.delivered) < pending {
			<-tick.C
		}
		total += time.Since(start)
		tick.Stop()
		if err := d.Shutdown(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(total.Seconds()/float64(b.N), "s-to-empty")
}
