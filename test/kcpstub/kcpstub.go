// Package kcpstub is a test double for the KCP end of the event path as the
// skr-webhook sees it: it replaces the KCP's Istio ingress gateway (TLS
// MUTUAL: a client certificate is required and verified against a CA) and the
// operator's listener behind it (POST /v2/<manager>/event with a WatchEvent
// body of at most 16 KiB), which cannot run here. The skr-webhook's tests and
// benchmarks use it. It is a real HTTPS server (HTTP/2 and HTTP/1.1) on
// 127.0.0.1. It records every event with the serial number of the client
// certificate it came with, and can fail like a real KCP does: refuse
// connections (nothing listening on the port), blackhole them (TCP is
// accepted, then nothing is read or written, on new and existing
// connections) or answer with a chosen status.
package kcpstub

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Mode is how the stub treats connections.
type Mode int

// Modes.
const (
	// Serving answers requests.
	Serving Mode = iota
	// Refusing listens on nothing: connections are refused; existing ones
	// are closed.
	Refusing
	// Blackholed accepts TCP connections but neither reads nor writes on
	// any connection until the mode changes.
	Blackholed
)

// Delivery is one event the stub answered with 2xx.
type Delivery struct {
	Manager string
	Event   contract.WatchEvent
	// Serial is the client certificate's serial number (decimal).
	Serial string
	At     time.Time
	// Observed is what Options.OnEvent returned for it.
	Observed string
}

// Options configure the stub.
type Options struct {
	// ClientCAs verify client certificates (required).
	ClientCAs *x509.CertPool
	// Certificate is the server certificate.
	Certificate tls.Certificate
	// OnEvent, when set, runs for each event before it is answered (e.g. to
	// read the watched object as a KCP operator would); its result is kept
	// in Delivery.Observed.
	OnEvent func(Delivery) string
	// CountOnly keeps counts but not the list of deliveries (benchmarks).
	CountOnly bool
	// Status, when set, chooses the answer to each event (0: the status of
	// SetStatus), e.g. to fail a fraction of the events.
	Status func(manager string, ev contract.WatchEvent) int
}

// Stub is a running KCP stand-in.
type Stub struct {
	opts Options
	addr string
	srv  *http.Server
	ln   *chanListener

	mu    sync.Mutex
	mode  Mode
	raw   net.Listener  // nil while refusing
	gate  chan struct{} // closed while not blackholed
	conns map[*gatedConn]struct{}

	status          atomic.Int32
	total           atomic.Int64 // 2xx answers
	answered        atomic.Int64 // all answers
	handshakeErrors atomic.Int64

	rec        sync.Mutex
	deliveries []Delivery
	perKey     map[string]int
}

// Start listens on 127.0.0.1 on a free port and serves.
func Start(opts Options) (*Stub, error) {
	if opts.ClientCAs == nil {
		return nil, errors.New("kcpstub: ClientCAs required")
	}
	raw, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s := &Stub{
		opts:   opts,
		addr:   raw.Addr().String(),
		ln:     &chanListener{addr: raw.Addr(), conns: make(chan net.Conn), done: make(chan struct{})},
		raw:    raw,
		gate:   make(chan struct{}),
		conns:  map[*gatedConn]struct{}{},
		perKey: map[string]int{},
	}
	close(s.gate)
	s.status.Store(http.StatusOK)
	s.srv = &http.Server{
		Handler:           s,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          log.New(handshakeCounter{s}, "", 0),
		TLSConfig: &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{opts.Certificate},
			ClientAuth:   tls.RequireAndVerifyClientCert,
			ClientCAs:    opts.ClientCAs,
			NextProtos:   []string{"h2", "http/1.1"},
		},
	}
	go s.accept(raw)
	go func() { _ = s.srv.ServeTLS(s.ln, "", "") }()
	return s, nil
}

// Addr is host:port of the stub (constant across mode changes).
func (s *Stub) Addr() string { return s.addr }

// SetStatus makes the stub answer events with code (default 200).
func (s *Stub) SetStatus(code int) { s.status.Store(int32(code)) }

// SetMode switches between serving, refusing and blackholing.
func (s *Stub) SetMode(m Mode) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if m == s.mode {
		return nil
	}
	// Leave the old mode.
	switch s.mode {
	case Blackholed:
		close(s.gate)
	}
	// Enter the new one.
	switch m {
	case Refusing:
		if s.raw != nil {
			_ = s.raw.Close()
			s.raw = nil
		}
		for c := range s.conns {
			_ = c.Conn.Close()
		}
	case Serving, Blackholed:
		if s.raw == nil {
			raw, err := listenAgain(s.addr)
			if err != nil {
				return err
			}
			s.raw = raw
			go s.accept(raw)
		}
		if m == Blackholed {
			s.gate = make(chan struct{})
		}
	default:
		return fmt.Errorf("kcpstub: unknown mode %d", m)
	}
	s.mode = m
	return nil
}

// listenAgain binds the same address again (briefly retrying while the
// kernel still holds it).
func listenAgain(addr string) (net.Listener, error) {
	var err error
	for i := 0; i < 50; i++ {
		var ln net.Listener
		if ln, err = net.Listen("tcp", addr); err == nil {
			return ln, nil
		}
		<-time.After(20 * time.Millisecond)
	}
	return nil, fmt.Errorf("kcpstub: listen again on %s: %w", addr, err)
}

func (s *Stub) accept(raw net.Listener) {
	for {
		c, err := raw.Accept()
		if err != nil {
			return
		}
		gc := &gatedConn{Conn: c, s: s, closed: make(chan struct{})}
		s.mu.Lock()
		s.conns[gc] = struct{}{}
		s.mu.Unlock()
		select {
		case s.ln.conns <- gc:
		case <-s.ln.done:
			_ = gc.Close()
			return
		}
	}
}

func (s *Stub) currentGate() chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.gate
}

// Close stops the stub.
func (s *Stub) Close() {
	s.mu.Lock()
	if s.raw != nil {
		_ = s.raw.Close()
		s.raw = nil
	}
	if s.mode == Blackholed {
		close(s.gate)
		s.mode = Serving
	}
	s.mu.Unlock()
	_ = s.srv.Close()
	s.mu.Lock()
	conns := make([]*gatedConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	for _, c := range conns {
		_ = c.Close()
	}
}

// ServeHTTP is the event endpoint.
func (s *Stub) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	manager, ok := contract.ManagerFromEventPath(r.URL.Path)
	if !ok {
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	if r.TLS == nil || len(r.TLS.PeerCertificates) == 0 {
		http.Error(w, "client certificate required", http.StatusUnauthorized)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, contract.MaxEventBodyBytes))
	if err != nil {
		http.Error(w, err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	var ev contract.WatchEvent
	if err := json.Unmarshal(body, &ev); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	code := int(s.status.Load())
	if s.opts.Status != nil {
		if c := s.opts.Status(manager, ev); c != 0 {
			code = c
		}
	}
	s.answered.Add(1)
	if code < 200 || code > 299 {
		http.Error(w, "stub failure", code)
		return
	}
	d := Delivery{Manager: manager, Event: ev, Serial: r.TLS.PeerCertificates[0].SerialNumber.String(), At: time.Now()}
	if s.opts.OnEvent != nil {
		d.Observed = s.opts.OnEvent(d)
	}
	s.rec.Lock()
	s.perKey[key(manager, ev)]++
	if !s.opts.CountOnly {
		s.deliveries = append(s.deliveries, d)
	}
	s.rec.Unlock()
	s.total.Add(1)
	w.WriteHeader(code)
}

func key(manager string, ev contract.WatchEvent) string {
	g := ev.WatchedGvk
	return strings.Join([]string{manager, g.Group, g.Version, g.Kind, ev.Watched.Namespace, ev.Watched.Name}, "/")
}

// Total is the number of events answered with 2xx.
func (s *Stub) Total() int64 { return s.total.Load() }

// Answered is the number of events answered with any status.
func (s *Stub) Answered() int64 { return s.answered.Load() }

// HandshakeErrors counts failed TLS handshakes (e.g. an unknown client
// certificate or none).
func (s *Stub) HandshakeErrors() int64 { return s.handshakeErrors.Load() }

// Count is the number of 2xx deliveries of one manager's object.
func (s *Stub) Count(manager string, ev contract.WatchEvent) int {
	s.rec.Lock()
	defer s.rec.Unlock()
	return s.perKey[key(manager, ev)]
}

// Deliveries returns a copy of the recorded deliveries, oldest first.
func (s *Stub) Deliveries() []Delivery {
	s.rec.Lock()
	defer s.rec.Unlock()
	return append([]Delivery(nil), s.deliveries...)
}

// DeliveriesOf returns the recorded deliveries of one manager's object.
func (s *Stub) DeliveriesOf(manager string, ev contract.WatchEvent) []Delivery {
	k := key(manager, ev)
	var out []Delivery
	for _, d := range s.Deliveries() {
		if key(d.Manager, d.Event) == k {
			out = append(out, d)
		}
	}
	return out
}

// handshakeCounter is the server's error log: it counts TLS handshake
// errors and drops the text.
type handshakeCounter struct{ s *Stub }

func (h handshakeCounter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), "TLS handshake error") {
		h.s.handshakeErrors.Add(1)
	}
	return len(p), nil
}

// gatedConn blocks reads and writes while the stub is blackholed.
type gatedConn struct {
	net.Conn
	s      *Stub
	closed chan struct{}
	once   sync.Once
}

func (c *gatedConn) wait() error {
	select {
	case <-c.s.currentGate():
		return nil
	case <-c.closed:
		return net.ErrClosed
	}
}

func (c *gatedConn) Read(b []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	n, err := c.Conn.Read(b)
	if werr := c.wait(); werr != nil { // data that came in while blackholed is held back
		return 0, werr
	}
	return n, err
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if err := c.wait(); err != nil {
		return 0, err
	}
	return c.Conn.Write(b)
}

func (c *gatedConn) Close() error {
	c.once.Do(func() {
		close(c.closed)
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}

// chanListener hands accepted connections to the HTTP server.
type chanListener struct {
	addr  net.Addr
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
