package streamlimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// serve runs a gRPC server with the limiter's tap and the health service
// (Check answers at once, Watch stays open, so a Watch holds its slot).
func serve(t *testing.T, max int) (*streamlimit.Limiter, *prometheus.Registry, string) {
	t.Helper()
	reg := prometheus.NewRegistry()
	l, err := streamlimit.New(max, reg)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.InTapHandle(l.Tap))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return l, reg, lis.Addr().String()
}

func dial(t *testing.T, addr string) *grpc.ClientConn {
	t.Helper()
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func waitInFlight(t *testing.T, l *streamlimit.Limiter, want int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for l.InFlight() != want {
		if time.Now().After(deadline) {
			t.Fatalf("streams in flight: %d, want %d", l.InFlight(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func watch(t *testing.T, ctx context.Context, c *grpc.ClientConn) {
	t.Helper()
	w, err := healthpb.NewHealthClient(c).Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Recv(); err != nil { // the first status: the server holds the stream
		t.Fatal(err)
	}
}

func check(ctx context.Context, c *grpc.ClientConn) codes.Code {
	_, err := healthpb.NewHealthClient(c).Check(ctx, &healthpb.HealthCheckRequest{})
	return status.Code(err)
}

// TestBoundAndRelease: streams over the bound are refused with
// RESOURCE_EXHAUSTED; a slot comes back when its stream ends by a normal
// status, a cancel (RST_STREAM) or the connection closing.
func TestBoundAndRelease(t *testing.T) {
	ctx := t.Context()
	l, reg, addr := serve(t, 2)
	a, b := dial(t, addr), dial(t, addr)

	if got := check(ctx, a); got != codes.OK {
		t.Fatalf("Check: %v", got)
	}
	waitInFlight(t, l, 0) // a finished unary call

	wctx, cancelWatch := context.WithCancel(ctx)
	watch(t, wctx, a)
	watch(t, ctx, b)
	waitInFlight(t, l, 2)
	if got := check(ctx, a); got != codes.ResourceExhausted {
		t.Fatalf("Check over the bound: %v, want ResourceExhausted", got)
	}
	if got := rejected(t, reg); got != 1 {
		t.Fatalf("streams_rejected_total %v, want 1", got)
	}

	cancelWatch() // RST_STREAM
	waitInFlight(t, l, 1)
	if got := check(ctx, a); got != codes.OK {
		t.Fatalf("Check after a slot was released: %v", got)
	}
	waitInFlight(t, l, 1)

	_ = b.Close() // the connection goes away with its Watch open
	waitInFlight(t, l, 0)
}

// TestEndedStreamTakenBackAtOnce: grpc-go closes a stream's context before
// it writes the stream's status, so once a client has its answer, the
// stream's slot is free for the next stream: with one slot, Checks one
// after another never see RESOURCE_EXHAUSTED (nothing reads InFlight in
// between; Tap takes the slot back itself).
func TestEndedStreamTakenBackAtOnce(t *testing.T) {
	ctx := t.Context()
	_, reg, addr := serve(t, 1)
	c := dial(t, addr)
	for i := range 20 {
		if got := check(ctx, c); got != codes.OK {
			t.Fatalf("Check %d: %v", i, got)
		}
	}
	if got := rejected(t, reg); got != 0 {
		t.Fatalf("streams_rejected_total %v, want 0", got)
	}
}

// TestStalledStreamReleasedWithConnection: a stream that sent its headers
// and never a message (the handler waits in its receive) holds a slot until
// its connection closes; so does an unknown method's until it is answered.
func TestStalledStreamReleasedWithConnection(t *testing.T) {
	ctx := t.Context()
	l, _, addr := serve(t, 4)
	c := dial(t, addr)
	desc := &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}
	for range 3 {
		if _, err := c.NewStream(ctx, desc, "/grpc.health.v1.Health/Check"); err != nil {
			t.Fatal(err)
		}
	}
	waitInFlight(t, l, 3)
	if err := c.Invoke(ctx, "/no.Such/Method", &healthpb.HealthCheckRequest{}, &healthpb.HealthCheckResponse{}); status.Code(err) != codes.Unimplemented {
		t.Fatalf("unknown method: %v", err)
	}
	waitInFlight(t, l, 3)
	_ = c.Close()
	waitInFlight(t, l, 0)
}

// rejected reads runtime_watcher_ext_authz_streams_rejected_total.
func rejected(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	got, err := promtext.Gathered(reg, "runtime_watcher_ext_authz_streams_rejected_total")
	if err != nil {
		t.Fatal(err)
	}
	n, ok := got[""]
	if !ok {
		t.Fatal("no runtime_watcher_ext_authz_streams_rejected_total")
	}
	return n
}

// TestWithTimeout: a stream that never sends its message is ended with
// DEADLINE_EXCEEDED after the timeout and gives its slot back, on a
// connection that stays usable; a health Watch outlives the timeout.
func TestWithTimeout(t *testing.T) {
	ctx := t.Context()
	l, err := streamlimit.New(4, nil)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const d = 300 * time.Millisecond
	s := grpc.NewServer(grpc.InTapHandle(streamlimit.WithTimeout(d, l.Tap)))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	c := dial(t, lis.Addr().String())

	watch(t, ctx, c)
	start := time.Now()
	st, err := c.NewStream(ctx, &grpc.StreamDesc{ClientStreams: true, ServerStreams: true}, "/grpc.health.v1.Health/Check")
	if err != nil {
		t.Fatal(err)
	}
	waitInFlight(t, l, 2)
	err = st.RecvMsg(&healthpb.HealthCheckResponse{})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("stalled Check: %v, want DeadlineExceeded", err)
	}
	if took := time.Since(start); took < d || took > 5*d {
		t.Fatalf("stalled Check ended after %s, want about %s", took, d)
	}
	waitInFlight(t, l, 1) // the Watch keeps its slot
	time.Sleep(d)
	waitInFlight(t, l, 1)
	if got := check(ctx, c); got != codes.OK {
		t.Fatalf("Check on the same connection: %v", got)
	}
}

// TestWithTimeoutContexts: the stream's context ending first ends the
// bounded one at once (so its timer is stopped with it), and a client
// deadline sooner than the bound is kept as it is (no second timer).
func TestWithTimeoutContexts(t *testing.T) {
	pass := func(ctx context.Context, _ *tap.Info) (context.Context, error) { return ctx, nil }
	tapFn := streamlimit.WithTimeout(time.Hour, pass)
	info := &tap.Info{FullMethodName: "/envoy.service.auth.v3.Authorization/Check"}

	stream, end := context.WithCancel(context.Background())
	bounded, err := tapFn(stream, info)
	if err != nil {
		t.Fatal(err)
	}
	if dl, ok := bounded.Deadline(); !ok || time.Until(dl) < 59*time.Minute {
		t.Fatalf("deadline %v %v, want about an hour from now", dl, ok)
	}
	end()
	if bounded.Err() != context.Canceled {
		t.Fatalf("stream ended, bounded context: %v", bounded.Err())
	}

	soon, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got, err := tapFn(soon, info)
	if err != nil || got != soon {
		t.Fatalf("a client deadline within the bound must be kept as is: %v, %v", got, err)
	}
	watch, err := tapFn(stream, &tap.Info{FullMethodName: streamlimit.HealthWatch})
	if err != nil || watch != stream {
		t.Fatalf("health Watch must not be bounded: %v, %v", watch, err)
	}
}
