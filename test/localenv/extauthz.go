package localenv

import (
	"context"
	"strconv"
	"sync"
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
