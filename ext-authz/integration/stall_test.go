package integration_test

import (
	"bufio"
	"bytes"
	binenc "encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
)

// stallConn is a raw HTTP/2 client connection to ext-authz's gRPC port that
// opens Check streams, sends each a gRPC message prefix announcing msgLen
// bytes and then all but the last byte of the message, and stalls: what a
// hostile caller does to make grpc-go buffer unfinished messages. It honours
// HTTP/2 flow control (as it must, or grpc-go resets the stream), answers
// SETTINGS and PING, and records how the server answered each stream.
type stallConn struct {
	conn net.Conn
	wmu  sync.Mutex // guards fr's writes and bw
	bw   *bufio.Writer
	fr   *http2.Framer

	mu      sync.Mutex
	changed *sync.Cond
	connWin int64
	initWin int64
	streams map[uint32]*stallStream
	readErr error
}

type stallStream struct {
	win     int64
	granted bool       // a WINDOW_UPDATE arrived: the handler read the prefix and waits for the message
	ended   bool       // the server answered (trailers) or reset the stream
	status  codes.Code // grpc-status of the answer; meaningful when ended
	reset   bool       // ended by RST_STREAM without a status
}

// stallResult counts how the streams of one connection fared.
type stallResult struct {
	stalled  int                // granted, and all but the last byte sent
	statuses map[codes.Code]int // answered streams by grpc-status
	resets   int                // reset without a status (e.g. REFUSED_STREAM)
}

func dialStall(addr string) (*stallConn, error) {
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, err
	}
	bw := bufio.NewWriterSize(conn, 64<<10)
	c := &stallConn{conn: conn, bw: bw, fr: http2.NewFramer(bw, conn), connWin: 65535, initWin: 65535, streams: map[uint32]*stallStream{}}
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.changed = sync.NewCond(&c.mu)
	if _, err := bw.Write([]byte(http2.ClientPreface)); err != nil {
		conn.Close()
		return nil, err
	}
	if err := c.write(func(fr *http2.Framer) error { return fr.WriteSettings() }); err != nil {
		conn.Close()
		return nil, err
	}
	go c.read()
	return c, nil
}

func (c *stallConn) Close() error { return c.conn.Close() }

// write writes frames and flushes them.
func (c *stallConn) write(f func(*http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := f(c.fr); err != nil {
		return err
	}
	return c.bw.Flush()
}

// writeBuffered writes frames, flushing only a full buffer (many tiny frames).
func (c *stallConn) writeBuffered(f func(*http2.Framer) error) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return f(c.fr)
}

func (c *stallConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.bw.Flush()
}

// read handles the server's frames until the connection fails.
func (c *stallConn) read() {
	for {
		f, err := c.fr.ReadFrame()
		c.mu.Lock()
		if err != nil {
			c.readErr = err
			c.changed.Broadcast()
			c.mu.Unlock()
			return
		}
		var reply func(*http2.Framer) error
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				if v, ok := f.Value(http2.SettingInitialWindowSize); ok {
					for _, s := range c.streams {
						s.win += int64(v) - c.initWin
					}
					c.initWin = int64(v)
				}
				reply = func(fr *http2.Framer) error { return fr.WriteSettingsAck() }
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.connWin += int64(f.Increment)
			} else if s := c.streams[f.StreamID]; s != nil {
				s.win += int64(f.Increment)
				s.granted = true
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				data := f.Data
				reply = func(fr *http2.Framer) error { return fr.WritePing(true, data) }
			}
		case *http2.MetaHeadersFrame:
			if s := c.streams[f.StreamID]; s != nil && f.StreamEnded() {
				code, _ := strconv.Atoi(f.PseudoValue("status"))
				if v := headerValue(f, "grpc-status"); v != "" {
					code, _ = strconv.Atoi(v)
				}
				s.ended, s.status = true, codes.Code(code)
			}
		case *http2.RSTStreamFrame:
			if s := c.streams[f.StreamID]; s != nil && !s.ended {
				s.ended, s.reset = true, true
			}
		}
		c.changed.Broadcast()
		c.mu.Unlock()
		if reply != nil {
			_ = c.write(reply)
		}
	}
}

func headerValue(f *http2.MetaHeadersFrame, name string) string {
	for _, hf := range f.RegularFields() {
		if hf.Name == name {
			return hf.Value
		}
	}
	return ""
}

// stall opens n Check streams one after the other. Each sends its HEADERS
// and the 5-byte message prefix announcing msgLen bytes; a stream the server
// takes gets a WINDOW_UPDATE for the whole message (grpc-go grants it when
// the handler reads the prefix) and is then sent msgLen-1 bytes in 16 KiB
// DATA frames (frameSize bytes: the tiny-frames attack sends 1-byte ones),
// never the last byte and never END_STREAM. A stream the server refuses is
// left alone.
func (c *stallConn) stall(n, msgLen, frameSize int, timeout time.Duration) (stallResult, error) {
	deadline := time.Now().Add(timeout)
	timer := time.AfterFunc(timeout, func() { c.mu.Lock(); c.changed.Broadcast(); c.mu.Unlock() })
	defer timer.Stop()
	res := stallResult{statuses: map[codes.Code]int{}}
	payload := make([]byte, frameSize)
	var hbuf bytes.Buffer
	enc := hpack.NewEncoder(&hbuf)
	for i := range n {
		id := uint32(2*i + 1)
		hbuf.Reset()
		for _, kv := range [][2]string{
			{":method", "POST"}, {":scheme", "http"}, {":path", "/envoy.service.auth.v3.Authorization/Check"},
			{":authority", "ext-authz"}, {"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			if err := enc.WriteField(hpack.HeaderField{Name: kv[0], Value: kv[1]}); err != nil {
				return res, err
			}
		}
		c.mu.Lock()
		s := &stallStream{win: c.initWin}
		c.streams[id] = s
		c.mu.Unlock()
		prefix := make([]byte, 5)
		binenc.BigEndian.PutUint32(prefix[1:], uint32(msgLen))
		if err := c.write(func(fr *http2.Framer) error {
			if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: hbuf.Bytes(), EndHeaders: true}); err != nil {
				return err
			}
			return fr.WriteData(id, false, prefix)
		}); err != nil {
			return res, err
		}
		c.mu.Lock()
		c.connWin -= 5
		s.win -= 5
		for !s.granted && !s.ended && c.readErr == nil && time.Now().Before(deadline) {
			c.changed.Wait()
		}
		c.mu.Unlock()
		for left := msgLen - 1; left > 0; {
			c.mu.Lock()
			if s.win <= 0 || c.connWin <= 0 {
				c.mu.Unlock()
				if err := c.flush(); err != nil {
					return res, err
				}
				c.mu.Lock()
			}
			for (s.win <= 0 || c.connWin <= 0) && !s.ended && c.readErr == nil && time.Now().Before(deadline) {
				c.changed.Wait()
			}
			if s.ended || c.readErr != nil || !time.Now().Before(deadline) {
				c.mu.Unlock()
				break
			}
			k := int64(min(left, len(payload)))
			k = min(k, s.win, c.connWin)
			s.win -= k
			c.connWin -= k
			c.mu.Unlock()
			if err := c.writeBuffered(func(fr *http2.Framer) error { return fr.WriteData(id, false, payload[:k]) }); err != nil {
				return res, err
			}
			left -= int(k)
			if left == 0 {
				if err := c.flush(); err != nil {
					return res, err
				}
			}
			if left == 0 {
				res.stalled++
			}
		}
		c.mu.Lock()
		err := c.readErr
		c.mu.Unlock()
		if err != nil {
			return res, fmt.Errorf("stream %d: %w", id, err)
		}
		if !time.Now().Before(deadline) {
			return res, errors.New("timed out")
		}
	}
	// Answers may still be on their way for the last streams.
	time.Sleep(200 * time.Millisecond)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.streams {
		switch {
		case s.ended && !s.reset:
			res.statuses[s.status]++
		case s.ended:
			res.resets++
		}
	}
	return res, nil
}
