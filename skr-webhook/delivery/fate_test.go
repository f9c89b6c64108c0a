package delivery

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// TestSettle is settle's table, row by row: one leased event, one answer,
// and what became of the event (still owed or not) and of its manager
// (the resync requested). No worker runs; the clock is fake.
func TestSettle(t *testing.T) {
	const maxAge = time.Minute
	for _, tc := range []struct {
		name    string
		key     Key
		answer  Result
		age     time.Duration // how long ago the event's newest change was
		owed    int           // deliveries still owed afterwards (a requested resync included)
		counter string        // the counter that moved, with its labels
		labels  []string
		resync  contract.ResyncReason // the resync of the manager requested besides startup
	}{
		{name: "2xx: delivered", key: key("a"), answer: Result{Outcome: Delivered, Status: 200}, counter: "events_delivered_total"},
		{name: "400: dropped", key: key("a"), answer: Result{Outcome: Rejected, Status: 400, Err: errors.New("bad")}, counter: "events_dropped_total", labels: []string{"reason", DropBadRequest}},
		{name: "413: dropped", key: key("a"), answer: Result{Outcome: Rejected, Status: 413, Err: errors.New("large")}, counter: "events_dropped_total", labels: []string{"reason", DropTooLarge}},
		{name: "unsendable: dropped", key: key("a"), answer: Result{Outcome: Rejected, Err: errors.New("invalid")}, counter: "events_dropped_total", labels: []string{"reason", DropInvalid}},
		{name: "403: retried", key: key("a"), answer: Result{Outcome: Retriable, Status: 403, Err: errors.New("cache behind")}, owed: 1, counter: "event_retries_total"},
		{name: "transport error: retried", key: key("a"), answer: Result{Outcome: Retriable, Err: errors.New("reset")}, owed: 1, counter: "event_retries_total"},
		{name: "503 past the maximum age: expired", key: key("a"), answer: Result{Outcome: Retriable, Status: 503, Err: errors.New("down")}, age: maxAge + time.Second,
			owed: 1, counter: "events_dropped_total", labels: []string{"reason", DropExpired}, resync: contract.ResyncExpired},
		{name: "a resync never expires", key: ResyncKey("m"), answer: Result{Outcome: Retriable, Status: 503, Err: errors.New("down")}, age: 10 * maxAge,
			owed: 1, counter: "event_retries_total"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clk := testingclock.NewFakeClock(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
			reg := prometheus.NewRegistry()
			d := New(Config{MaxRetryAge: maxAge, Clock: clk, Registerer: reg, Jitter: func(n time.Duration) time.Duration { return n }}, nil, logr.Discard())
			if tc.key.Control == ControlResync {
				d.Resync("m", contract.ResyncOverflow)
			} else {
				d.queue.Add(tc.key)
			}
			clk.Step(tc.age)
			l, ok := d.queue.Get(context.Background())
			if !ok {
				t.Fatal("nothing to lease")
			}
			ev, ok := d.event(l)
			if !ok {
				t.Fatal("no event for the lease")
			}
			d.settle(l, ev, tc.answer)
			if got := metric(t, reg, "runtime_watcher_skr_webhook_"+tc.counter, tc.labels...); got != 1 {
				t.Errorf("%s%v = %v, want 1", tc.counter, tc.labels, got)
			}
			if got := d.Depth(); got != tc.owed {
				t.Errorf("%d deliveries owed, want %d", got, tc.owed)
			}
			if tc.resync != "" {
				if got := metric(t, reg, "runtime_watcher_skr_webhook_resyncs_requested_total", "reason", string(tc.resync)); got != 1 {
					t.Errorf("%s resyncs requested: %v, want 1", tc.resync, got)
				}
			}
		})
	}
}
