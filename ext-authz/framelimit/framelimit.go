// Package framelimit closes gRPC connections whose client sends DATA frames
// that cost grpc-go far more memory than the bytes they carry (issue 15,
// "tiny DATA frames").
//
// Why: grpc-go copies every DATA frame of a stream into a buffer of its own
// and keeps it until the message is complete (transport handleData,
// mem.Copy): a frame of up to 1 KiB into an exact-size slice plus ~100
// bytes of bookkeeping, a larger one into a pooled buffer of the next tier
// of 4 KiB, 16 KiB, 32 KiB (grpc-go v1.75.1 mem.defaultBufferPoolSizes).
// A 255 KiB message sent as 1-byte frames costs ~15 MiB (about 60 bytes
// per byte, measured), as 1,025-byte frames ~1 MiB (4 KiB per frame): the message
// size and stream bounds (package streamlimit) do not bound that.
//
// How: Conn wraps the server side of a connection and parses the bytes the
// client sends just enough to see HTTP/2 frame headers (the 24-byte client
// preface, then 9-byte headers whose payloads it skips). For each stream it
// adds up the "waste" of its DATA frames: what grpc-go allocates for the
// frame (Cost) minus the bytes it carries. When one stream's waste exceeds
// MaxWastePerStream (128 KiB) the connection is closed. A stream's tally is
// dropped when the client ends it (END_STREAM on DATA or HEADERS) or resets
// it (RST_STREAM). More than MaxOpenStreams streams with a tally closes the
// connection too (grpc-go takes at most 4,096 streams per connection).
//
// Legitimate clients never come near it: grpc-go and Envoy write a message
// in DATA frames of the maximum size (16 KiB, which grpc-go buffers without
// waste) except for the message's last frame and frames cut short by flow
// control; a unary Check of a few KiB is one frame (waste < 4 KiB) and an
// empty END_STREAM frame. Even 10 frames cut at the worst size (4,097 bytes,
// 12 KiB waste each) fit in 128 KiB. So a stream pins at most its message
// plus 128 KiB (+ one frame): 256 streams × (320 + 128) KiB = 112 MiB.
package framelimit

import (
	"errors"
	"net"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// ClientPreface is what an HTTP/2 client sends before its first frame.
const ClientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

const (
	// MaxWastePerStream bounds the memory grpc-go may spend on a stream's
	// DATA frames beyond the bytes they carry.
	MaxWastePerStream = 128 << 10
	// MaxOpenStreams bounds the streams with a tally on one connection.
	MaxOpenStreams = 4096
	// FrameOverhead is what grpc-go allocates per buffered DATA frame
	// besides its data (buffer object, reference count, queue entry).
	FrameOverhead = 96

	frameHeaderLen   = 9
	typeData         = 0x0
	typeHeaders      = 0x1
	typeRSTStream    = 0x3
	flagEndStream    = 0x1
	flagPadded       = 0x8
	poolingThreshold = 1 << 10
	maxFrameLen      = 16 << 10 // grpc-go's SETTINGS_MAX_FRAME_SIZE
)

// poolSizes are grpc-go v1.75.1's buffer pool tiers (mem.defaultBufferPoolSizes).
var poolSizes = []int{256, 4 << 10, 16 << 10, 32 << 10, 1 << 20}

// Cost is what grpc-go allocates to buffer a DATA frame carrying n bytes.
func Cost(n int) int {
	if n == 0 {
		return FrameOverhead // not buffered, but it costs a frame's work
	}
	if n <= poolingThreshold {
		return (n+15)&^15 + FrameOverhead
	}
	for _, s := range poolSizes {
		if n <= s {
			return s + FrameOverhead
		}
	}
	return n + FrameOverhead
}

// paddedWaste is charged for a padded DATA frame, whose data length the
// parser does not read: the most any frame of up to 16 KiB can waste.
var paddedWaste = Cost(4<<10+1) - (4<<10 + 1)

// Reason says why a Parser refused the byte stream ("" while it has not).
type Reason string

const (
	ReasonSmallFrames Reason = "small_frames" // a stream's DATA frames wasted more than MaxWastePerStream
	ReasonOpenStreams Reason = "open_streams" // more than MaxOpenStreams streams with a tally
)

// Parser follows the client's side of one HTTP/2 connection. It never
// reads beyond the bytes it is given; it keeps 9 bytes of a partial frame
// header, a counter and the tallies of the open streams.
type Parser struct {
	preface int // preface bytes seen (up to 24)
	hdr     [9]byte
	hn      int    // bytes of hdr filled
	skip    uint32 // payload bytes still to skip
	waste   map[uint32]int
	reason  Reason
}

// Reason is why the parser refused the stream, or "".
func (p *Parser) Reason() Reason { return p.reason }

// Streams is the number of streams with a tally.
func (p *Parser) Streams() int { return len(p.waste) }

// Feed parses b, the next bytes the client sent, and returns the reason to
// close the connection ("" to go on). After a refusal it ignores its input.
func (p *Parser) Feed(b []byte) Reason {
	for len(b) > 0 && p.reason == "" {
		switch {
		case p.preface < len(ClientPreface):
			k := min(len(ClientPreface)-p.preface, len(b))
			p.preface += k
			b = b[k:]
		case p.skip > 0:
			k := min(p.skip, uint32(len(b)))
			p.skip -= k
			b = b[k:]
		default:
			k := copy(p.hdr[p.hn:], b)
			p.hn += k
			b = b[k:]
			if p.hn == frameHeaderLen {
				p.hn = 0
				p.frame()
			}
		}
	}
	return p.reason
}

// frame handles the complete frame header in p.hdr.
func (p *Parser) frame() {
	length := uint32(p.hdr[0])<<16 | uint32(p.hdr[1])<<8 | uint32(p.hdr[2])
	typ, flags := p.hdr[3], p.hdr[4]
	id := (uint32(p.hdr[5])<<24 | uint32(p.hdr[6])<<16 | uint32(p.hdr[7])<<8 | uint32(p.hdr[8])) & 0x7fffffff
	p.skip = length
	switch typ {
	case typeData:
		if flags&flagEndStream != 0 {
			delete(p.waste, id)
			return
		}
		w := Cost(int(length)) - int(length)
		if flags&flagPadded != 0 || length > maxFrameLen {
			w = max(w, paddedWaste)
		}
		if p.waste == nil {
			p.waste = map[uint32]int{}
		}
		_, known := p.waste[id]
		if !known && len(p.waste) >= MaxOpenStreams {
			p.reason = ReasonOpenStreams
			return
		}
		p.waste[id] += w
		if p.waste[id] > MaxWastePerStream {
			p.reason = ReasonSmallFrames
		}
	case typeHeaders:
		if flags&flagEndStream != 0 {
			delete(p.waste, id)
		}
	case typeRSTStream:
		delete(p.waste, id)
	}
}

// ErrClosed is what Read returns once the connection was closed for its frames.
var ErrClosed = errors.New("framelimit: connection closed: DATA frames waste too much memory")

// Metrics counts connections closed, by reason.
type Metrics struct {
	closed *prometheus.CounterVec
}

// NewMetrics registers runtime_watcher_ext_authz_connections_closed_total
// on reg (when not nil).
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{closed: prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "connections_closed_total",
		Help: "gRPC connections ext-authz closed because of the frames their client sent (reason small_frames: DATA frames costing far more memory than they carry; open_streams).",
	}, []string{"reason"})}
	for _, r := range []Reason{ReasonSmallFrames, ReasonOpenStreams} {
		m.closed.WithLabelValues(string(r))
	}
	if reg != nil {
		if err := reg.Register(m.closed); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// Listener wraps every accepted connection in a Conn.
type Listener struct {
	net.Listener
	Metrics *Metrics // may be nil
}

// Accept returns the next connection, wrapped.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &Conn{Conn: c, metrics: l.Metrics}, nil
}

// Conn is a server-side connection whose reads are parsed; it is closed at
// the first read that breaks the rule (package comment).
type Conn struct {
	net.Conn
	metrics *Metrics

	mu     sync.Mutex // Reads are serial in grpc-go; the lock keeps it safe anyway
	parser Parser
}

// Read reads from the connection and parses what it got; when that breaks
// the rule it closes the connection and returns ErrClosed instead.
func (c *Conn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	already := c.parser.Reason() != ""
	reason := c.parser.Feed(b[:n])
	c.mu.Unlock()
	if reason != "" {
		if !already {
			_ = c.Close()
			if c.metrics != nil {
				c.metrics.closed.WithLabelValues(string(reason)).Inc()
			}
		}
		return 0, ErrClosed
	}
	return n, err
}
