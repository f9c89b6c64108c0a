// Package streamlimit bounds the gRPC streams ext-authz holds at once, over
// all connections together, and so the memory a caller can pin with
// messages it never finishes.
//
// Why: grpc-go reads a message's DATA frames into buffers as they arrive,
// up to the length its 5-byte prefix announces, and widens the stream's
// flow-control window to the whole message as soon as it has read that
// prefix (transport.inFlow.maybeAdjust); the connection window is
// replenished on receipt, not on reading. A stream that sends all but the
// last byte of a 256 KiB message and stalls therefore pins about 320 KiB
// (the message plus the 64 KiB initial window) until the stream ends.
// Per-connection stream limits times connection limits do not bound the
// total usefully (128 × 64 × 320 KiB = 2.5 GiB).
//
// How: Limiter.Tap is the server's grpc.InTapHandle. grpc-go calls it for
// every new stream after the HEADERS frame and before the stream is
// registered, so before a single DATA byte of it is buffered; the DATA
// frames of a stream the tap refused are dropped. Tap takes a slot, or
// refuses the stream with RESOURCE_EXHAUSTED when all slots are taken (fail
// closed: Envoy denies the request). A slot holds the Done channel of the
// stream's context, which grpc-go closes on every way a registered stream
// ends: its status written (finishStream), a reset or protocol error
// (closeStream) and the connection closing (Close cancels every active
// stream). The one path between Tap and registration that does not cancel
// it, an already expired grpc-timeout, runs only when that context is
// already done. Slots whose channel is closed are taken back when they are
// needed: when every slot is taken, and whenever the number in flight is
// read. So a refusal counts exactly the streams still open, and a stream
// costs one lock and one append, no goroutine (context.AfterFunc, the
// obvious hook, registers a child context and starts a goroutine per
// stream: 1.7 µs of CPU per Check, BenchmarkTapPerStream). A slot keeps
// only the channel, not the stream's context or anything it references.
package streamlimit

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/tap"
)

// PinnedBytesPerStream is what one stream can make grpc-go buffer: a
// message of at most 256 KiB (MaxRecvMsgSize) plus the 64 KiB initial
// stream window. Memory pinned by streams <= max streams × this.
const PinnedBytesPerStream = (256 + 64) << 10

// Limiter counts streams in flight; at most Max at once.
type Limiter struct {
	max      int
	mu       sync.Mutex
	slots    []<-chan struct{} // the Done channels of the streams holding a slot; closed ones not yet taken back
	rejected prometheus.Counter
	gauge    prometheus.GaugeFunc
}

// New returns a Limiter of max streams; its metrics are registered on reg
// when reg is not nil.
func New(max int, reg prometheus.Registerer) (*Limiter, error) {
	l := &Limiter{max: max, slots: make([]<-chan struct{}, 0, max)}
	l.rejected = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "streams_rejected_total",
		Help: "gRPC streams refused with RESOURCE_EXHAUSTED because --max-total-streams were in flight.",
	})
	l.gauge = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "streams_in_flight",
		Help: "gRPC streams in flight over all connections (at most --max-total-streams).",
	}, func() float64 { return float64(l.InFlight()) })
	if reg != nil {
		for _, c := range []prometheus.Collector{l.rejected, l.gauge} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// InFlight is the number of streams holding a slot (open streams).
func (l *Limiter) InFlight() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.takeBackLocked()
	return int64(len(l.slots))
}

// takeBackLocked frees the slots of the streams that have ended.
func (l *Limiter) takeBackLocked() {
	open := l.slots[:0]
	for _, done := range l.slots {
		select {
		case <-done:
		default:
			open = append(open, done)
		}
	}
	clear(l.slots[len(open):]) // no reference to a closed channel stays behind
	l.slots = open
}

// Tap is a grpc.InTapHandle (grpc.InTapHandle(l.Tap)). grpc-go calls it
// with the transport's lock held: it never blocks (a short lock; when every
// slot is taken, one pass over at most Max channels).
func (l *Limiter) Tap(ctx context.Context, _ *tap.Info) (context.Context, error) {
	done := ctx.Done()
	l.mu.Lock()
	if len(l.slots) >= l.max {
		l.takeBackLocked()
	}
	if len(l.slots) >= l.max {
		l.mu.Unlock()
		l.rejected.Inc()
		return ctx, status.Errorf(codes.ResourceExhausted, "ext-authz: %d gRPC streams in flight, the most it takes at once", l.max)
	}
	l.slots = append(l.slots, done)
	l.mu.Unlock()
	return ctx, nil
}

// HealthWatch is the one method WithTimeout leaves alone: a Watch stream
// stays open for as long as its client watches.
const HealthWatch = "/grpc.health.v1.Health/Watch"

// WithTimeout returns a tap that runs next and then bounds every stream but
// HealthWatch to d: the context it returns ends d after the stream began.
// grpc-go v1.75.1 makes the tap's context the stream's (operateHeaders
// assigns it to s.ctx before the stream is registered) and its message
// reader returns when s.ctx is done, so a Check whose client stalls or
// dribbles its message fails with DEADLINE_EXCEEDED after d, its status is
// written, the stream is deleted and its buffers freed. next sees the
// stream's own context, so what it ties to the stream's end (the slot of
// Limiter.Tap) stays tied to the real end, not to d.
func WithTimeout(d time.Duration, next tap.ServerInHandle) tap.ServerInHandle {
	return func(ctx context.Context, info *tap.Info) (context.Context, error) {
		ctx, err := next(ctx, info)
		if err != nil || info.FullMethodName == HealthWatch {
			return ctx, err
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
			// The client's own deadline (grpc-timeout; Envoy sends its
			// ext_authz timeout, 200 ms by default) comes first: no
			// second timer per Check.
			return ctx, nil
		}
		// The stream's context is a cancelable one of grpc-go's: when the
		// stream ends first, cancelling it cancels this child too, which
		// stops the timer. No AfterFunc (a goroutine per stream) is needed.
		tctx, cancel := context.WithTimeout(ctx, d)
		_ = cancel // released through the parent, see above
		return tctx, nil
	}
}
