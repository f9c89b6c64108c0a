package localenv

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// extAuthzProcess is ext-authz's process and how to start it again.
type extAuthzProcess struct {
	mu     sync.Mutex
	p      *process
	binary string
	args   []string
	health string
	starts int
}

// SetExtAuthzUp stops ext-authz (an outage behind the gateway: the
// gateway's ext_authz calls fail) or starts it again and waits until it is
// ready.
func (s *System) SetExtAuthzUp(ctx context.Context, up bool) error {
	a := &s.authz
	a.mu.Lock()
	defer a.mu.Unlock()
	if !up {
		err := a.p.stop()
		a.p = nil
		return err
	}
	if a.p != nil {
		return nil
	}
	name := "ext-authz"
	if a.starts > 0 {
		name += "-" + strconv.Itoa(a.starts) // a fresh log per start
	}
	a.starts++
	p, err := s.start(name, a.binary, nil, nil, a.args...)
	if err != nil {
		return err
	}
	a.p = p
	return p.waitReady(ctx, "http://"+a.health+"/readyz", time.Minute)
}

// SetExtAuthzFrozen stops ext-authz's process without ending it (SIGSTOP:
// its connections stay open, requests are accepted by the kernel and never
// answered — an authz server slower than any timeout) or lets it go on
// (SIGCONT).
func (s *System) SetExtAuthzFrozen(frozen bool) error {
	a := &s.authz
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return errors.New("ext-authz is not running")
	}
	sig := syscall.SIGCONT
	if frozen {
		sig = syscall.SIGSTOP
	}
	return syscall.Kill(a.p.pid(), sig)
}

// ExtAuthzLog is the log of the running ext-authz ("" when it is not
// running): its decision log lines (Options.LogAllChecks: every Check).
func (s *System) ExtAuthzLog() string {
	a := &s.authz
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.p == nil {
		return ""
	}
	return a.p.log
}
