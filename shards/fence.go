package shards

import (
	"context"
	"errors"
	"net/http"
)

// ErrFenced is the error of a pass's request that FenceTransport did not
// send: the member's own clock says its renew deadline passed.
var ErrFenced = errors.New("shards: member fenced (its renew deadline passed without a renewal): request of a pass not sent")

// passKey marks a pass's context (Begin) with its member.
type passKey struct{}

// FenceTransport wraps rt (a client-go transport.WrapperFunc, for the
// KCP's and the runtimes' clients): a request made under a pass's context
// is sent only while its member's own clock says the renew deadline has not
// passed. The watchdog cancels the passes at that deadline, but a process
// that was stopped mid-pass (SIGSTOP, a frozen VM) runs its goroutines
// again in no particular order once it resumes: this check, right before
// the request leaves, keeps a pass from writing after the others may have
// taken its runtime.
func FenceTransport(rt http.RoundTripper) http.RoundTripper {
	return fenced{rt}
}

type fenced struct{ next http.RoundTripper }

func (f fenced) RoundTrip(req *http.Request) (*http.Response, error) {
	if s, ok := req.Context().Value(passKey{}).(*Shards); ok && !s.live() {
		s.m.unsent()
		return nil, ErrFenced
	}
	return f.next.RoundTrip(req)
}

// live: not fenced, and the renew deadline not passed by our own clock.
func (s *Shards) live() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return !s.fenced && s.o.Clock.Now().Before(s.deadline)
}

func withPass(ctx context.Context, s *Shards) context.Context {
	return context.WithValue(ctx, passKey{}, s)
}
