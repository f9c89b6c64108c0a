package ratelimit

import (
	"context"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Run reports and sweeps every interval until ctx is done: one log line
// naming the runtimes most often over their limit in the interval (none
// when no runtime was), then Sweep. log is the decision log's logger: a
// request over its limit is not a decision log line of its own (a flood
// of them would crowd out every other refusal under the log's
// lines-per-second bound), the report names it instead.
func (l *Limiter) Run(ctx context.Context, interval time.Duration, clk clock.WithTicker, log logr.Logger) {
	if clk == nil {
		clk = clock.RealClock{}
	}
	t := clk.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			l.logReport(log, interval)
			l.Sweep(clk.Now())
		}
	}
}

// logReport writes one line when some runtime was over its limit.
func (l *Limiter) logReport(log logr.Logger, interval time.Duration) {
	top, others := l.Report()
	if len(top) == 0 && others == 0 {
		return
	}
	names := make([]string, len(top))
	counts := make([]uint64, len(top))
	for i, o := range top {
		names[i], counts[i] = contract.Bounded(o.Runtime), o.Over
	}
	mode := ModeEnforce
	if l.shadow {
		mode = ModeShadow
	}
	log.Info("runtimes over their rate limit", "mode", mode, "intervalSeconds", interval.Seconds(),
		"runtimes", names, "overLimit", counts, "overLimitOthers", others)
}
