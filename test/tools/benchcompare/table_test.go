package main

import (
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

// sample answers n requests of latency lat each at cpu per request.
func sample(n int, lat, cpu time.Duration) loadgen.Sample {
	s := loadgen.Sample{Wall: time.Second, CPU: cpu * time.Duration(n), HasCPU: true}
	for range n {
		s.Latencies = append(s.Latencies, lat)
	}
	return s
}

// The table pairs every server with the ceiling of the same repetition,
// prints the twin's ratio beside the others' and judges loadgen's goals.
func TestTableRatiosTwinAndGoals(t *testing.T) {
	c := &comparison{group: groupExtAuthz, servers: []server{
		{name: "ceiling", role: roleCeiling}, {name: "twin", role: roleTwin}, {name: "ext-authz"}, {name: "OPA", role: rolePeer},
	}}
	tb := &table{}
	tb.add(c, closedLoad(16), 0, []loadgen.Sample{
		sample(100, 100*time.Microsecond, 40*time.Microsecond),
		sample(100, 100*time.Microsecond, 41*time.Microsecond),
		sample(100, 120*time.Microsecond, 46*time.Microsecond), // 1.15×: misses ≤ 1.10×
		sample(100, 900*time.Microsecond, 500*time.Microsecond),
	})
	open := &comparison{group: groupExtAuthz, servers: c.servers[:3]}
	tb.add(open, openLoad, 5000, []loadgen.Sample{
		sample(100, 100*time.Microsecond, 40*time.Microsecond),
		sample(100, 101*time.Microsecond, 40*time.Microsecond),
		sample(100, 120*time.Microsecond, 41*time.Microsecond), // 1.025×, but +20 µs
	})
	var b strings.Builder
	met, all := tb.render(&b)
	out := b.String()
	if met != 3 || all != 4 {
		t.Fatalf("%d of %d goals met, want 3 of 4:\n%s", met, all, out)
	}
	for _, want := range []string{
		"| ext_authz gRPC | closed, 16 conc. | ext-authz | 46.0 | 1.15× | 1.02× |", // the twin's 41/40 beside it
		"| CPU ≤ 1.10× | **no** |",
		"ext-authz's CPU / this: 0.092×, ≤ 0.10× | yes |",
		"| open, 5000/s (50 % of the ceiling's saturated rate) | ext-authz | 41.0 | 1.02× | 1.00× | 120 | +20 |",
		"| CPU ≤ 1.03×; p50 added ≤ 30 µs | yes; yes |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// Kyma's listener is the listener's peer: the listener's CPU over its, in
// the open loop, judged against ≤ 0.8×; beside the ceiling goal.
func TestTableKymaListenerPeer(t *testing.T) {
	c := &comparison{group: groupListener, servers: []server{
		{name: "ceiling", role: roleCeiling}, {name: "twin", role: roleTwin}, {name: "listener"}, {name: "Kyma's listener v1.4.3", role: rolePeer},
	}}
	tb := &table{}
	tb.add(c, openLoad, 10000, []loadgen.Sample{
		sample(100, 100*time.Microsecond, 40*time.Microsecond),
		sample(100, 100*time.Microsecond, 40*time.Microsecond),
		sample(100, 110*time.Microsecond, 42*time.Microsecond), // 1.05× the ceiling
		sample(100, 300*time.Microsecond, 84*time.Microsecond), // the listener at 0.50× of it
	})
	var b strings.Builder
	met, all := tb.render(&b)
	out := b.String()
	if met != 2 || all != 2 {
		t.Fatalf("%d of %d goals met, want 2 of 2:\n%s", met, all, out)
	}
	for _, want := range []string{
		"| listener | 42.0 | 1.05× | 1.00× | 110 | +10 | 110 | 100 | CPU ≤ 1.08× | yes |",
		"| Kyma's listener v1.4.3 | 84.0 | 2.10× | 1.00× | 300 | +200 | 300 | 100 | the listener's CPU / this: 0.50×, ≤ 0.80× | yes |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

// The edge's always-allow row carries the goal ≤ 1.05×, its twin none (it
// was judged against OPA's ≤ 0.50× once, a miss the table reported for a
// noise row), and OPA's row ≤ 0.50×.
func TestTableEdgeAllowTwinHasNoGoal(t *testing.T) {
	c := &comparison{group: groupEdge, servers: []server{
		{name: "ceiling", role: roleCeiling}, {name: "twin", role: roleTwin}, {name: edgeSubject},
		{name: edgeAllow, role: rolePeer}, {name: edgeAllowTwin, role: rolePeer}, {name: "Envoy + OPA", role: rolePeer},
	}}
	tb := &table{}
	tb.add(c, closedLoad(16), 0, []loadgen.Sample{
		sample(100, 100*time.Microsecond, 100*time.Microsecond),
		sample(100, 100*time.Microsecond, 100*time.Microsecond),
		sample(100, 300*time.Microsecond, 300*time.Microsecond),
		sample(100, 300*time.Microsecond, 310*time.Microsecond),
		sample(100, 300*time.Microsecond, 305*time.Microsecond),
		sample(100, 900*time.Microsecond, 1000*time.Microsecond),
	})
	var b strings.Builder
	met, all := tb.render(&b)
	out := b.String()
	if met != 2 || all != 2 {
		t.Fatalf("%d of %d goals met, want 2 of 2 (the twin judged against nothing):\n%s", met, all, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "| "+edgeAllowTwin+" |") && !strings.HasSuffix(line, "|  |  |") {
			t.Errorf("the twin row carries a goal: %s", line)
		}
	}
}
