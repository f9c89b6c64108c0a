package framelimit_test

import (
	"context"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/framelimit"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// frame is an HTTP/2 frame header followed by length payload bytes.
func frame(typ, flags byte, id uint32, length int) []byte {
	b := []byte{byte(length >> 16), byte(length >> 8), byte(length), typ, flags, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
	return append(b, make([]byte, length)...)
}

func TestCost(t *testing.T) {
	for n, want := range map[int]int{0: 96, 1: 16 + 96, 1024: 1024 + 96, 1025: 4096 + 96, 4096: 4096 + 96, 4097: 16384 + 96, 16384: 16384 + 96} {
		if got := framelimit.Cost(n); got != want {
			t.Errorf("Cost(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestParser(t *testing.T) {
	t.Run("full frames never trip it", func(t *testing.T) {
		var p framelimit.Parser
		in := []byte(framelimit.ClientPreface)
		for range 1000 {
			in = append(in, frame(0, 0, 1, 16<<10)...)
		}
		if r := p.Feed(in); r != "" || p.Streams() != 1 {
			t.Fatalf("reason %q, streams %d", r, p.Streams())
		}
	})
	t.Run("1-byte frames trip it", func(t *testing.T) {
		var p framelimit.Parser
		p.Feed([]byte(framelimit.ClientPreface))
		n := 0
		for p.Feed(frame(0, 0, 3, 1)) == "" {
			n++
		}
		if p.Reason() != framelimit.ReasonSmallFrames || n != framelimit.MaxWastePerStream/(framelimit.Cost(1)-1) {
			t.Fatalf("reason %q after %d frames", p.Reason(), n)
		}
	})
	t.Run("1025-byte frames trip it", func(t *testing.T) {
		var p framelimit.Parser
		p.Feed([]byte(framelimit.ClientPreface))
		n := 0
		for p.Feed(frame(0, 0, 3, 1025)) == "" {
			n++
		}
		if n > 64 {
			t.Fatalf("tripped after %d frames (%d KiB)", n, n*1025>>10)
		}
	})
	t.Run("ending or resetting a stream drops its tally", func(t *testing.T) {
		var p framelimit.Parser
		p.Feed([]byte(framelimit.ClientPreface))
		// Many small unary calls on one connection: a small frame, then END_STREAM.
		for i := range uint32(100000) {
			id := 2*i + 1
			end := frame(0, 1, id, 0)
			switch i % 3 {
			case 1:
				end = frame(1, 1, id, 0) // trailers-like HEADERS with END_STREAM
			case 2:
				end = frame(3, 0, id, 4) // RST_STREAM
			}
			if r := p.Feed(append(frame(0, 0, id, 10), end...)); r != "" {
				t.Fatalf("call %d: %q", i, r)
			}
		}
		if p.Streams() != 0 {
			t.Fatalf("%d tallies left", p.Streams())
		}
	})
	t.Run("open streams are bounded", func(t *testing.T) {
		var p framelimit.Parser
		p.Feed([]byte(framelimit.ClientPreface))
		for i := range uint32(framelimit.MaxOpenStreams + 1) {
			p.Feed(frame(0, 0, 2*i+1, 10))
		}
		if p.Reason() != framelimit.ReasonOpenStreams {
			t.Fatalf("reason %q", p.Reason())
		}
	})
	t.Run("split anywhere", func(t *testing.T) {
		in := []byte(framelimit.ClientPreface)
		for range 2000 {
			in = append(in, frame(0, 0, 5, 1)...)
		}
		var whole, bytewise framelimit.Parser
		whole.Feed(in)
		for i := range in {
			bytewise.Feed(in[i : i+1])
		}
		if whole.Reason() != framelimit.ReasonSmallFrames || bytewise.Reason() != whole.Reason() {
			t.Fatalf("whole %q, byte by byte %q", whole.Reason(), bytewise.Reason())
		}
	})
}

// serve runs a gRPC health server on a wrapped listener.
func serve(t *testing.T) (string, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	m, err := framelimit.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.MaxRecvMsgSize(1 << 20))
	hs := health.NewServer()
	healthpb.RegisterHealthServer(s, hs)
	go func() { _ = s.Serve(&framelimit.Listener{Listener: lis, Metrics: m}) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String(), reg
}

func closed(t *testing.T, reg *prometheus.Registry, reason string) float64 {
	t.Helper()
	got, err := promtext.Gathered(reg, "runtime_watcher_ext_authz_connections_closed_total", "reason")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := got[reason]
	if !ok {
		t.Fatalf("no metric for %s", reason)
	}
	return n
}

func TestGRPCClientsPass(t *testing.T) {
	addr, reg := serve(t)
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(1<<20)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	c := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Small and large messages (up to 900 KiB: many frames, flow control),
	// concurrently, on one connection; unknown services answer NotFound.
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for w := range 16 {
		wg.Go(func() {
			for i := range 40 {
				size := []int{1, 100, 1000, 1025, 3000, 4097, 20000, 100000, 900000}[(w+i)%9]
				_, err := c.Check(ctx, &healthpb.HealthCheckRequest{Service: strings.Repeat("s", size)})
				if err != nil && !strings.Contains(err.Error(), "NotFound") {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if _, err := c.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	if n := closed(t, reg, "small_frames"); n != 0 {
		t.Fatalf("%v connections closed", n)
	}
}

func TestDribblerIsCutOff(t *testing.T) {
	addr, reg := serve(t)
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fr := http2.NewFramer(conn, conn)
	go func() { _, _ = io.Copy(io.Discard, conn) }()
	var hbuf strings.Builder
	enc := hpack.NewEncoder(&hbuf)
	for _, kv := range [][2]string{{":method", "POST"}, {":scheme", "http"}, {":path", "/grpc.health.v1.Health/Check"},
		{":authority", "x"}, {"content-type", "application/grpc"}, {"te", "trailers"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]})
	}
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: []byte(hbuf.String()), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	if err := fr.WriteData(1, false, []byte{0, 0, 0, 0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	sent := 0
	for ; sent < 60000; sent++ {
		if err := fr.WriteData(1, false, []byte{'x'}); err != nil {
			break
		}
	}
	if sent == 60000 {
		// Writes may be buffered by the kernel; the server must have closed by now.
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := conn.Write(make([]byte, 1<<20)); err == nil {
			t.Fatalf("connection still open after %d 1-byte frames", sent)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for closed(t, reg, "small_frames") != 1 {
		if time.Now().After(deadline) {
			t.Fatal("not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("cut off after at most %d 1-byte frames", sent)
}
