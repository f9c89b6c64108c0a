package shards

import (
	"context"
	"errors"
	"io"
	"net/http"
	"sync/atomic"
	"time"
)

// ErrFenced is the error of a pass's request that FenceTransport did not
// send: the member's own clock says its renew deadline passed, or the
// pass's view was given up.
var ErrFenced = errors.New("shards: member fenced (its renew deadline passed without a renewal, or its view changed): request of a pass not sent")

// passKey marks a pass's context (Begin) with its member and epoch.
type passKey struct{}

type passOf struct {
	s *Shards
	e *epoch
}

// FenceTransport wraps rt (a client-go transport.WrapperFunc, for the
// KCP's and the runtimes' clients) for the requests made under a pass's
// context:
//
//   - a request is sent only while its member's own clock says the renew
//     deadline has not passed and the view the pass began under is still
//     the member's. The watchdog cancels the passes at that deadline, but
//     a process that was stopped mid-pass (SIGSTOP, a frozen VM) runs its
//     goroutines again in no particular order once it resumes: this check,
//     right before the request leaves, keeps a pass from writing after the
//     others may have taken its runtime;
//   - a request sent is held to its answer: when the pass is cancelled the
//     request returns to it at once, but the member publishes a view that
//     gives the runtime away only once the API server answered (or the
//     request failed for itself). Go's HTTP/2 client writes a request in
//     its own goroutine, so a request cancelled on the client can still
//     reach the server after the cancellation; issue 40's audit saw such a
//     write land after the view that handed its runtime on.
func FenceTransport(rt http.RoundTripper) http.RoundTripper {
	return fenced{rt}
}

type fenced struct{ next http.RoundTripper }

type answer struct {
	resp *http.Response
	err  error
}

func (f fenced) RoundTrip(req *http.Request) (*http.Response, error) {
	p, ok := req.Context().Value(passKey{}).(passOf)
	if !ok {
		return f.next.RoundTrip(req)
	}
	if !p.s.live() {
		p.s.m.unsent()
		return nil, ErrFenced
	}
	if err := req.Context().Err(); err != nil {
		return nil, err // the pass ended: never sent
	}
	answered, ok := p.e.send()
	if !ok {
		p.s.m.unsent()
		return nil, ErrFenced
	}
	// On the wire the request outlives its pass's cancellation by at most
	// RenewDeadline (a server that does not answer must not hold the view
	// change for ever); its own deadline still bounds it.
	base := context.WithoutCancel(req.Context())
	var ctx context.Context
	var cancel context.CancelFunc
	if d, ok := req.Context().Deadline(); ok {
		ctx, cancel = context.WithDeadline(base, d)
	} else {
		ctx, cancel = context.WithCancel(base)
	}
	var back atomic.Bool // answered: a cancelled pass ends the body at once
	stop := context.AfterFunc(req.Context(), func() {
		if back.Load() {
			cancel()
			return
		}
		time.AfterFunc(p.s.o.RenewDeadline, cancel)
	})
	done := make(chan answer, 1)
	go func() {
		resp, err := f.next.RoundTrip(req.WithContext(ctx))
		back.Store(true)
		answered()
		if err != nil {
			stop()
			cancel()
		} else {
			resp.Body = &body{ReadCloser: resp.Body, close: func() { stop(); cancel() }}
		}
		done <- answer{resp, err}
	}()
	select {
	case a := <-done:
		return a.resp, a.err
	case <-req.Context().Done():
		go func() {
			if a := <-done; a.resp != nil {
				_ = a.resp.Body.Close()
			}
		}()
		return nil, req.Context().Err()
	}
}

// body ends the request's context when it is closed.
type body struct {
	io.ReadCloser
	close func()
}

func (b *body) Close() error {
	err := b.ReadCloser.Close()
	b.close()
	return err
}

// live: not fenced, and the renew deadline not passed by our own clock.
func (s *Shards) live() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.fenced && s.o.Clock.Now().Before(s.deadline)
}

func withPass(ctx context.Context, s *Shards, e *epoch) context.Context {
	return context.WithValue(ctx, passKey{}, passOf{s, e})
}
