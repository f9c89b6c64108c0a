package loadgen

import (
	"fmt"
	"strconv"
)

// Goal bounds one measured figure. Every performance goal the benchmarks
// print is one of the variables below, and docs/performance.md quotes them.
type Goal struct {
	What    string  // the figure
	Bound   float64 // in Unit
	Unit    string  // "×", "µs", "ms", "MiB", "events/s"
	AtLeast bool    // a lower bound; else an upper bound
	Issue   int     // the issue that set it
}

// Met reports whether v (in the goal's unit) meets the goal.
func (g Goal) Met(v float64) bool {
	if g.AtLeast {
		return v >= g.Bound
	}
	return v <= g.Bound
}

// String is the bound, e.g. "≤ 1.10×".
func (g Goal) String() string {
	op := "≤"
	if g.AtLeast {
		op = "≥"
	}
	num := strconv.FormatFloat(g.Bound, 'f', -1, 64)
	switch g.Unit {
	case "×":
		return fmt.Sprintf("%s %.2f×", op, g.Bound)
	case "events/s":
		return fmt.Sprintf("%s %s %s", op, thousands(int(g.Bound)), g.Unit)
	}
	return fmt.Sprintf("%s %s %s", op, num, g.Unit)
}

// Verdict is "yes" or "**no**" (Markdown) for v.
func (g Goal) Verdict(v float64) string {
	if g.Met(v) {
		return "yes"
	}
	return "**no**"
}

// OpenLoadFraction is the offered rate of the open-loop comparisons, as a
// fraction of the ceiling's saturated (closed-loop) rate measured in the
// same run: a load well below saturation, where latency is the server's
// and not the queue's.
const OpenLoadFraction = 0.5

// The cost goals (issue 26, docs/architecture.md §3.14): server CPU per
// request as a ratio to the ceiling's in the same interleaved run, and the
// latency added over the ceiling below saturation.
var (
	ExtAuthzCPUClosed = Goal{What: "ext-authz CPU per Check / the always-allow ceiling's, closed loop (16 and 64 connections)", Bound: 1.10, Unit: "×", Issue: 26}
	ExtAuthzCPUOpen   = Goal{What: "ext-authz CPU per Check / the always-allow ceiling's, open loop at half the ceiling's saturated rate", Bound: 1.03, Unit: "×", Issue: 26}
	ExtAuthzCPUvsOPA  = Goal{What: "ext-authz CPU per Check / OPA's, closed loop", Bound: 0.10, Unit: "×", Issue: 26}
	// ExtAuthzRateLimitCPU: what the rate limit per runtime (issue 42)
	// adds, ext-authz against itself with --rate-limit-mode=off.
	ExtAuthzRateLimitCPU = Goal{What: "ext-authz CPU per Check with its rate limit per runtime / the same binary with --rate-limit-mode=off", Bound: 1.05, Unit: "×", Issue: 42}
	ExtAuthzAddedP50     = Goal{What: "median latency ext-authz adds over the ceiling, open loop at half the ceiling's saturated rate", Bound: 30, Unit: "µs", Issue: 26}
	// ListenerCPUOpen was 1.05× (issue 26); issue 31 set 1.08×: the
	// measured price of §3.6's event object (docs/performance.md), ≤ 1.05×
	// is below the noise once the object is built.
	ListenerCPUOpen   = Goal{What: "listener CPU per event / bare net/http's, open loop at half the ceiling's saturated rate", Bound: 1.08, Unit: "×", Issue: 31}
	ListenerCPUvsKyma = Goal{What: "listener CPU per event / Kyma's listener's (github.com/kyma-project/runtime-watcher/listener, test/tools/kymalistener), open loop at half the ceiling's saturated rate", Bound: 0.8, Unit: "×", Issue: 31}
)

// The whole edge (issue 32): CPU per event of Envoy and its authz server
// together (their two processes' clocks), Envoy with SAN pinning by
// ext-authz against the same Envoy without an ext_authz filter (the
// ceiling) and with OPA as the ext_authz provider (the peer), and the
// latency ext-authz adds at half the ceiling's saturated rate. First goals,
// to be tightened once measured.
var (
	// EdgeCPUvsAllow replaces issue 32's 1.30× of Envoy without ext_authz,
	// which no external ext_authz provider can meet (issue 42,
	// docs/performance.md): what SAN pinning adds is priced against the
	// same Envoy calling an always-allow ext_authz server.
	EdgeCPUvsAllow = Goal{What: "edge (Envoy + ext-authz) CPU per event / the same Envoy calling an always-allow ext_authz server, closed loop", Bound: 1.05, Unit: "×", Issue: 42}
	EdgeCPUvsOPA   = Goal{What: "edge (Envoy + ext-authz) CPU per event / the same Envoy with OPA as the ext_authz provider, closed loop", Bound: 0.5, Unit: "×", Issue: 32}
	EdgeAddedP50   = Goal{What: "median latency ext-authz adds at the edge over Envoy without ext_authz, open loop at half the ceiling's saturated rate", Bound: 150, Unit: "µs", Issue: 32}
)

// WebhookAdmissionP99 bounds skr-webhook's admission latency with the KCP
// healthy, refusing and blackholed (issue 18).
var WebhookAdmissionP99 = Goal{What: "skr-webhook admission p99", Bound: 5, Unit: "ms", Issue: 18}

// The listener alone (issue 5): events accepted per second and their p99
// over real HTTP on loopback with 16 concurrent senders.
var (
	ListenerEventsPerSecond = Goal{What: "listener events accepted per second", Bound: 10000, Unit: "events/s", AtLeast: true, Issue: 5}
	ListenerP99             = Goal{What: "listener event p99", Bound: 5, Unit: "ms", Issue: 5}
)

// ExtAuthzMemory bounds ext-authz's peak resident set (VmHWM) with a fleet
// of runtimes cached: 64 MiB up to 10,000 runtimes (issue 12), 192 MiB up
// to 100,000 (issue 18); no goal above.
func ExtAuthzMemory(runtimes int) (Goal, bool) {
	switch {
	case runtimes <= 10000:
		return Goal{What: "ext-authz VmHWM with up to 10,000 runtimes", Bound: 64, Unit: "MiB", Issue: 12}, true
	case runtimes <= 100000:
		return Goal{What: "ext-authz VmHWM with up to 100,000 runtimes", Bound: 192, Unit: "MiB", Issue: 18}, true
	}
	return Goal{}, false
}

func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
