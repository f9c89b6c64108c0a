//go:build linux

package listener_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// benchConcurrencies are the numbers of concurrent senders: 16 (issue 5)
// and 64 (issue 18, as make bench-compare).
var benchConcurrencies = []int{16, 64}

// BenchmarkEvents measures events accepted per second over real HTTP on
// loopback with 16 and 64 concurrent senders, and their p99 latency:
//   - listener: the Listener's real Start, default identity mode (runtime-id
//     header as ext-authz sets it), a consumer draining Events();
//   - bare-net-http: the same load against loadgen.BareHTTP, a net/http
//     server whose handler only reads the body and the headers — the limit
//     to compare with.
//
// Both get the headers make bench-compare sends (runtime-id, SKR domain and
// an XFCC of the gateway's size), from loadgen's closed loop. It also
// reports p50 latency and the process's CPU time per event (senders and
// server together, both in this process: make bench-compare runs each
// server in a process of its own and compares their own CPU).
//
// Goals for the listener: loadgen.ListenerEventsPerSecond and
// loadgen.ListenerP99 (at 16 senders; logged with pass/fail).
func BenchmarkEvents(b *testing.B) {
	hdr := http.Header{
		"Content-Type":           {"application/json"},
		contract.HeaderRuntimeID: {"runtime-a"},
		contract.HeaderSKRDomain: {"skr-a.kyma.example.com"},
		contract.HeaderXFCC:      {benchXFCC},
	}
	for _, conc := range benchConcurrencies {
		b.Run(fmt.Sprintf("listener-%d", conc), func(b *testing.B) {
			ln := loopback(b)
			l, err := listener.New("", "bench-manager", listener.WithNetListener(ln),
				listener.WithRegisterer(nil), listener.WithLogger(logr.Discard()))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- l.Start(ctx) }()
			allConsumed := make(chan struct{})
			go func() {
				for range b.N {
					select {
					case <-l.Events():
					case <-ctx.Done():
						return
					}
				}
				close(allConsumed)
			}()
			s := load(b, "http://"+ln.Addr().String()+l.Path(), hdr, conc)
			if conc == 16 {
				eps, p99 := loadgen.ListenerEventsPerSecond, loadgen.ListenerP99
				b.Logf("%.0f events/s (goal %s: %s), p99 %.2f ms (goal %s: %s)", s.RPS, eps, eps.Verdict(s.RPS), loadgen.Millis(s.P99), p99, p99.Verdict(loadgen.Millis(s.P99)))
			}
			select {
			case <-allConsumed:
			case <-time.After(10 * time.Second):
				b.Error("the consumer did not receive every accepted event")
			}
			cancel()
			if err := <-done; err != nil {
				b.Fatal(err)
			}
		})
		b.Run(fmt.Sprintf("bare-net-http-%d", conc), func(b *testing.B) {
			ln := loopback(b)
			srv := loadgen.BareHTTP()
			go func() { _ = srv.Serve(ln) }()
			defer srv.Close()
			load(b, "http://"+ln.Addr().String()+contract.EventPath("bench-manager"), hdr, conc)
		})
	}
}

// benchXFCC is an XFCC header of the size the gateway sends (one element
// with a URL-encoded PEM certificate, about 1.5 KiB); its content is not
// read in the default identity mode.
var benchXFCC = "By=spiffe://cluster.local/ns/kcp-system/sa/listener;Hash=" + strings.Repeat("ab", 32) +
	`;Subject="CN=runtime-a";URI=;DNS=skr-a.kyma.example.com;Cert="` + strings.Repeat("%2B", 500) + `"`

// BenchmarkHandler measures the handler alone (no sockets, no HTTP
// parsing): 64 goroutines (32 per CPU on the 2-CPU bench machine; scale
// with -cpu) call ServeHTTP with the body and headers of make bench-compare
// while a consumer drains Events(). ns/op and allocs/op are the listener's
// own cost per event; with -mutexprofile it shows lock contention.
func BenchmarkHandler(b *testing.B) {
	// Never started: the address is not used.
	l, err := listener.New("127.0.0.1:0", "bench-manager", listener.WithRegisterer(nil), listener.WithLogger(logr.Discard()))
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go loadgen.DrainEvents(ctx, l)
	// Canonical keys, as net/http's server parses them.
	hdr := http.Header{}
	hdr.Set("Content-Type", "application/json")
	hdr.Set(contract.HeaderRuntimeID, "runtime-a")
	hdr.Set(contract.HeaderSKRDomain, "skr-a.kyma.example.com")
	hdr.Set(contract.HeaderXFCC, benchXFCC)
	var failed, lastStatus atomic.Int64
	b.SetParallelism(64 / max(1, runtime.GOMAXPROCS(0)))
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		body := strings.NewReader(validBody)
		req := httptest.NewRequest(http.MethodPost, l.Path(), nil)
		req.Header = hdr
		w := &discardWriter{h: http.Header{}}
		for pb.Next() {
			body.Reset(validBody)
			req.Body, req.ContentLength = io.NopCloser(body), int64(len(validBody))
			clear(w.h)
			w.status = 0
			l.ServeHTTP(w, req)
			if w.status != http.StatusOK {
				failed.Add(1)
				lastStatus.Store(int64(w.status))
			}
		}
	})
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d requests not answered 200 (one: %d)", n, lastStatus.Load())
	}
}

// discardWriter is an http.ResponseWriter that keeps only the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(s int)   { w.status = s }
func (w *discardWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return len(p), nil
}

func loopback(b *testing.B) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	return ln
}

// load posts b.N events from conc goroutines over kept-alive
// connections (loadgen's closed loop) and reports events/s, latency
// percentiles and this process's CPU time per event. Every answer must be
// 200.
func load(b *testing.B, url string, hdr http.Header, conc int) loadgen.Summary {
	poster := loadgen.NewPoster(url, hdr, []byte(validBody), conc)
	defer poster.Close()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0, err := loadgen.ProcessCPU(os.Getpid())
	if err != nil {
		b.Fatal(err)
	}
	begin := time.Now()
	lat, err := loadgen.Closed(b.N, conc, func(int) error { return poster.Post() })
	elapsed := time.Since(begin)
	cpu1, _ := loadgen.ProcessCPU(os.Getpid())
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	s := loadgen.Summarize(lat, elapsed)
	b.ReportMetric(s.RPS, "events/s")
	b.ReportMetric(loadgen.Millis(s.P50), "p50-ms")
	b.ReportMetric(loadgen.Millis(s.P99), "p99-ms")
	// CPU time of the whole process (senders and server) per event: less
	// sensitive than wall-clock figures to other load on a shared host.
	b.ReportMetric(loadgen.Micros(cpu1-cpu0)/float64(b.N), "cpu-us/event")
	return s
}
