//go:build unix

package listener_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/listener"
)

// benchConcurrencies are the numbers of concurrent senders: 16 (issue 5)
// and 64 (issue 18, as make bench-compare).
var benchConcurrencies = []int{16, 64}

// BenchmarkEvents measures events accepted per second over real HTTP on
// loopback with 16 and 64 concurrent senders, and their p99 latency:
//   - listener: the Listener's real Start, default identity mode (runtime-id
//     header as ext-authz sets it), a consumer draining Events();
//   - bare-net-http: the same load against a net/http server whose handler
//     only reads the body and the headers — the limit to compare with.
//
// Both get the headers make bench-compare sends (runtime-id, SKR domain and
// an XFCC of the gateway's size). It also reports p50 latency and the
// process's CPU time per event (senders and server together), which varies
// less with other load on the host.
//
// Target for the listener: ≥ 10,000 events/s, p99 ≤ 5 ms.
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
			load(b, "http://"+ln.Addr().String()+l.Path(), hdr, conc)
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
			srv := &http.Server{
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
				ReadHeaderTimeout: listener.DefaultReadHeaderTimeout,
				ReadTimeout:       listener.DefaultReadTimeout,
				WriteTimeout:      listener.DefaultWriteTimeout,
				IdleTimeout:       listener.DefaultIdleTimeout,
			}
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
	go func() {
		for {
			select {
			case <-l.Events():
			case <-ctx.Done():
				return
			}
		}
	}()
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
// connections and reports events/s and latency percentiles. Every answer
// must be 200.
func load(b *testing.B, url string, hdr http.Header, conc int) {
	payload := []byte(validBody)
	client := &http.Client{Transport: &http.Transport{
		MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, DisableCompression: true,
	}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	latencies := make([]time.Duration, b.N)
	var next atomic.Int64
	var failed atomic.Int64
	var wg sync.WaitGroup
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	begin := time.Now()
	for range conc {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(payload))
				if err != nil {
					failed.Add(1)
					continue
				}
				req.Header = hdr
				t0 := time.Now()
				resp, err := client.Do(req)
				if err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
				latencies[i] = time.Since(t0)
				if err != nil || resp.StatusCode != http.StatusOK {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(begin)
	cpu := cpuTime() - cpu0
	b.StopTimer()
	if n := failed.Load(); n > 0 {
		b.Fatalf("%d of %d requests failed or were not 200", n, b.N)
	}
	slices.Sort(latencies)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(ms(percentile(latencies, 0.50)), "p50-ms")
	b.ReportMetric(ms(percentile(latencies, 0.99)), "p99-ms")
	// CPU time of the whole process (senders and server) per event: less
	// sensitive than wall-clock figures to other load on a shared host.
	b.ReportMetric(float64(cpu)/float64(time.Microsecond)/float64(b.N), "cpu-us/event")
}

// cpuTime is the user+system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(float64(len(sorted))*p+0.5) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
