package main

import (
	"fmt"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// A comparison measures servers of one kind side by side (docs/
// architecture.md §3.14): the ceiling first, its twin (a second identical
// ceiling process) second, then the servers compared. Every server runs in
// a process of its own; in each load, the servers get interleaved chunks of
// requests, and each server's CPU clock is read around its chunks.
type comparison struct {
	group   string
	servers []server
	conns   []int // closed-loop loads: concurrent requests
	// send sends request i (of a chunk starting at offset) to server s in
	// the named load.
	send func(s int, load string, offset, i int) error
}

type server struct {
	name string
	cpu  func() (time.Duration, error)
	// everyNth: the server gets a chunk in every nth round only (OPA,
	// whose CPU per request is an order of magnitude above the others:
	// fewer requests give it the same precision and keep the run short).
	everyNth int
	// closedOnly: not in the open loop (OPA's saturated rate is below the
	// offered rate, so an open loop would only measure its queue).
	closedOnly bool
	role       string // roleCeiling, roleTwin or ""
	// deadline of each request to an ext_authz server: the gateway's
	// (loadgen.GatewayAuthzTimeout, 500 ms) when 0.
	deadline time.Duration
}

const (
	roleCeiling = "ceiling"
	roleTwin    = "twin"
	openLoad    = "open"
	// maxInFlight bounds the open loop's unanswered requests per server.
	maxInFlight = 256
)

func closedLoad(conc int) string { return fmt.Sprintf("closed, %d conc.", conc) }

// runRepetition measures every load of c once and adds the figures to t.
func runRepetition(o options, c *comparison, t *table, rep int) error {
	var saturated float64
	for _, conc := range c.conns {
		load := closedLoad(conc)
		samples, err := loadgen.Interleave(targets(c.servers), o.requests/o.chunk, func(s, round int) ([]time.Duration, error) {
			if n := c.servers[s].everyNth; n > 1 && round%n != 0 {
				return nil, nil
			}
			off := (rep*len(c.conns)*o.requests + round*o.chunk) * 31
			return loadgen.Closed(o.chunk, conc, func(i int) error { return c.send(s, load, off, i) })
		})
		if err != nil {
			return fmt.Errorf("%s, %s: %w", c.group, load, err)
		}
		t.add(c, load, 0, samples)
		saturated = max(saturated, samples[0].RPS())
	}
	// The open loop: a fixed rate, a fraction of the ceiling's saturated
	// rate of this repetition.
	rate := loadgen.OpenLoadFraction * saturated
	var open []int
	for s, srv := range c.servers {
		if !srv.closedOnly {
			open = append(open, s)
		}
	}
	sub := make([]server, len(open))
	for i, s := range open {
		sub[i] = c.servers[s]
	}
	samples, err := loadgen.Interleave(targets(sub), o.requests/o.chunk, func(k, round int) ([]time.Duration, error) {
		off := (rep*o.requests + round*o.chunk) * 17
		return loadgen.Open(o.chunk, rate, maxInFlight, func(i int) error { return c.send(open[k], openLoad, off, i) })
	})
	if err != nil {
		return fmt.Errorf("%s, open loop at %.0f/s: %w", c.group, rate, err)
	}
	t.add(&comparison{group: c.group, servers: sub}, openLoad, rate, samples)
	return nil
}

func targets(servers []server) []loadgen.Target {
	ts := make([]loadgen.Target, len(servers))
	for i, s := range servers {
		ts[i] = loadgen.Target{Name: s.name, CPU: s.cpu}
	}
	return ts
}
