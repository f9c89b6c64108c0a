package health

import (
	"context"
	"hash/fnv"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"k8s.io/utils/clock"
)

// Runtime is one runtime the evaluator looks after.
type Runtime struct {
	// ID is the runtime ID (the certificate's CN, the Tracker's key).
	ID string
	// Kyma is its Kyma CR, the object its Events go to.
	Kyma client.Object
	// Managers are the managers whose webhooks vs-controller installs in
	// the runtime's SKR (its bundle): the only ones its health report
	// speaks for. A report naming another manager is not heeded for it
	// (counted); nil: none.
	Managers map[string]bool
}

// Prober finds out what the KCP can see of a runtime's path (runtimes.Reconciler).
type Prober interface {
	// Config checks the runtime's SKR webhook configuration: a Finding
	// with CauseWebhookConfigMissing or CauseWebhookConfigAltered, or a
	// healthy one. Called once per CheckInterval per runtime.
	Config(ctx context.Context, rt Runtime) (Finding, error)
	// Silent tells why a runtime is not heard; called once when it falls
	// silent and again every CheckInterval while it stays so.
	Silent(ctx context.Context, rt Runtime) (Finding, error)
}

// Reporter is told every change of a runtime's flag, and of the flagged
// set after each round.
type Reporter interface {
	Changed(ctx context.Context, rt Runtime, from, to Finding)
	Round(ctx context.Context, flagged map[string]Finding)
}

// Options of an Evaluator; zero values take the defaults.
type Options struct {
	// Silence: a runtime not heard for longer is silent (default 90 s:
	// three of the webhook's 30 s report intervals).
	Silence time.Duration
	// CheckInterval between two webhook configuration checks of a runtime
	// and two diagnoses of a silent one (default 90 s).
	CheckInterval time.Duration
	// DeliveryGrace: a manager whose deliveries all failed for this long is
	// flagged (default 60 s: a route being programmed, a listener's
	// rolling update pass under it).
	DeliveryGrace time.Duration
	// Tick between two rounds (default 10 s).
	Tick time.Duration
	// EventWindow damps a runtime whose flag flips: each change of cause
	// (from one cause, or healthy, to another) is told — an Event, the
	// Watchers' counts, a resync when it recovers — at most once per
	// window; a change held back is told once the window has passed if it
	// still holds (default 5 min).
	EventWindow time.Duration
	// Workers run the probes of a round (default 16); ProbeTimeout bounds
	// each (default 10 s).
	Workers      int
	ProbeTimeout time.Duration
	Clock        clock.WithTicker
	// Owns tells the runtimes whose reports this replica takes (nil: all
	// of them). With shards, the runtimes the runtimes function lists and
	// the ones Owns accepts are the same: the owner's.
	Owns func(runtimeID string) bool
}

// Defaults.
const (
	DefaultSilence       = 90 * time.Second
	DefaultCheckInterval = 90 * time.Second
	DefaultDeliveryGrace = 60 * time.Second
	DefaultTick          = 10 * time.Second
	DefaultEventWindow   = 5 * time.Minute
)

func (o *Options) defaults() {
	if o.Silence <= 0 {
		o.Silence = DefaultSilence
	}
	if o.CheckInterval <= 0 {
		o.CheckInterval = DefaultCheckInterval
	}
	if o.DeliveryGrace <= 0 {
		o.DeliveryGrace = DefaultDeliveryGrace
	}
	if o.Tick <= 0 {
		o.Tick = DefaultTick
	}
	if o.EventWindow <= 0 {
		o.EventWindow = DefaultEventWindow
	}
	if o.Workers <= 0 {
		o.Workers = 16
	}
	if o.ProbeTimeout <= 0 {
		o.ProbeTimeout = 10 * time.Second
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
}

// state is the evaluator's memory of one runtime.
type state struct {
	known     time.Time // first seen by this evaluator: the grace a restart gets
	nextCheck time.Time
	config    Finding
	silent    bool
	nextDiag  time.Time
	diagnosis Finding
	flag      Finding // as evaluated in the last round
	told      Finding // as last told (Events, Watcher counts, resync)
	// toldAt: when each change of cause (changeKey) was last told, only
	// those within the EventWindow: a few entries at most.
	toldAt []toldChange
	// judged: the time of the last report whose managers were judged
	// (those it may not speak for counted once per report).
	judged time.Time
}

// toldChange is one change of cause told at a time.
type toldChange struct {
	key string
	at  time.Time
}

// changeKey names a change of cause, managers aside: a flag that moves
// between managers of one cause is one change.
func changeKey(from, to Finding) string { return string(from.Cause) + ">" + string(to.Cause) }

// mayTell reports whether the change from told to f may be told now: not
// told within window before now. It forgets changes told before that.
func (st *state) mayTell(key string, now time.Time, window time.Duration) bool {
	st.toldAt = slices.DeleteFunc(st.toldAt, func(c toldChange) bool { return now.Sub(c.at) >= window })
	return !slices.ContainsFunc(st.toldAt, func(c toldChange) bool { return c.key == key })
}

func sameFlag(a, b Finding) bool { return a.Cause == b.Cause && a.Manager == b.Manager }

// Evaluator decides every runtime's flag (package comment).
type Evaluator struct {
	opts     Options
	tracker  *Tracker
	prober   Prober
	runtimes func(context.Context) ([]Runtime, error)
	reporter Reporter
	log      logr.Logger

	running atomic.Bool
	states  map[string]*state
	// owns: the runtimes this replica evaluates (Options.Owns).
	owns func(id string) bool
}

// NewEvaluator evaluates the runtimes runtimes() lists (those this replica
// owns) from what tracker heard.
func NewEvaluator(o Options, tracker *Tracker, runtimes func(context.Context) ([]Runtime, error), prober Prober, reporter Reporter, log logr.Logger) *Evaluator {
	o.defaults()
	return &Evaluator{opts: o, tracker: tracker, prober: prober, runtimes: runtimes, reporter: reporter, log: log, states: map[string]*state{}, owns: o.Owns}
}

// Evaluating reports whether Start runs.
func (e *Evaluator) Evaluating() bool { return e.running.Load() }

// Evaluates reports whether this evaluator takes runtime id's reports: it
// runs (the leader) and owns, by owns (nil: every runtime; a shard owner's
// test with #36). The report handler answers 421 otherwise, so the
// webhook's report reaches the replica that evaluates the runtime.
func (e *Evaluator) Evaluates(id string) bool {
	return e.running.Load() && (e.owns == nil || e.owns(id))
}

// Start runs a round every tick until ctx ends (a manager.Runnable that
// needs leadership).
func (e *Evaluator) Start(ctx context.Context) error {
	e.running.Store(true)
	defer e.running.Store(false)
	t := e.opts.Clock.NewTicker(e.opts.Tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C():
			if err := e.Round(ctx); err != nil && ctx.Err() == nil {
				e.log.Error(err, "health round failed")
			}
		}
	}
}

// phase spreads the first check of each runtime over the interval.
func phase(id string, interval time.Duration) time.Duration {
	h := fnv.New64a()
	_, _ = h.Write([]byte(id))
	return time.Duration(h.Sum64() % uint64(interval))
}

// Round evaluates every runtime once.
func (e *Evaluator) Round(ctx context.Context) error {
	start := e.opts.Clock.Now()
	rts, err := e.runtimes(ctx)
	if err != nil {
		return err
	}
	now := e.opts.Clock.Now()
	type job struct {
		st     *state
		rt     Runtime
		silent bool // a diagnosis, else a configuration check
	}
	var jobs []job
	present := make(map[string]bool, len(rts))
	heard := 0
	for _, rt := range rts {
		present[rt.ID] = true
		st := e.states[rt.ID]
		if st == nil {
			st = &state{known: now, nextCheck: now.Add(phase(rt.ID, e.opts.CheckInterval))}
			e.states[rt.ID] = st
		}
		last, _, ok := e.tracker.Last(rt.ID)
		if !ok || last.Before(st.known) {
			last = st.known
		} else {
			heard++
		}
		silent := now.Sub(last) > e.opts.Silence
		if !silent {
			st.silent, st.diagnosis = false, Finding{}
		} else if !st.silent || !now.Before(st.nextDiag) {
			st.silent, st.nextDiag = true, now.Add(e.opts.CheckInterval)
			jobs = append(jobs, job{st: st, rt: rt, silent: true})
		}
		if !now.Before(st.nextCheck) {
			st.nextCheck = st.nextCheck.Add(e.opts.CheckInterval)
			if st.nextCheck.Before(now) {
				st.nextCheck = now.Add(e.opts.CheckInterval)
			}
			jobs = append(jobs, job{st: st, rt: rt})
		}
	}
	// The probes of this round, bounded in concurrency and time.
	ch := make(chan job)
	var wg sync.WaitGroup
	for range min(e.opts.Workers, len(jobs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				pctx, cancel := context.WithTimeout(ctx, e.opts.ProbeTimeout)
				if j.silent {
					f, err := e.prober.Silent(pctx, j.rt)
					if err != nil {
						f = Finding{Cause: CauseNothingHeard, Detail: "the SKR could not be examined: " + err.Error()}
					}
					j.st.diagnosis = f
					probes.WithLabelValues("diagnose", outcome(f, err)).Inc()
				} else {
					f, err := e.prober.Config(pctx, j.rt)
					if err == nil { // unknown: keep the last answer
						j.st.config = f
					}
					probes.WithLabelValues("config", outcome(f, err)).Inc()
				}
				cancel()
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()

	now = e.opts.Clock.Now()
	flagged := map[string]Finding{}
	counts := map[Cause]int{}
	for _, rt := range rts {
		st := e.states[rt.ID]
		f := e.decide(rt, st, now)
		changed := !sameFlag(f, st.flag)
		if changed {
			transitions.WithLabelValues(transitionLabel(f)).Inc()
		}
		st.flag = f
		if !f.Healthy() {
			counts[f.Cause]++
		}
		if !sameFlag(f, st.told) {
			key := changeKey(st.told, f)
			switch {
			case st.mayTell(key, now, e.opts.EventWindow):
				if f.Healthy() {
					// Reviews may have been missed while it was broken.
					e.tracker.RequestResync(rt.ID)
				}
				e.reporter.Changed(ctx, rt, st.told, f)
				st.told = f
				st.toldAt = append(st.toldAt, toldChange{key: key, at: now})
				changesTold.WithLabelValues("told").Inc()
			case changed:
				changesTold.WithLabelValues("damped").Inc()
			}
		}
		if !st.told.Healthy() {
			flagged[rt.ID] = st.told
		}
	}
	for id := range e.states {
		if !present[id] {
			delete(e.states, id)
		}
	}
	e.tracker.Prune(func(id string) bool { return present[id] })
	for _, c := range Causes {
		flaggedRuntimes.WithLabelValues(string(c)).Set(float64(counts[c]))
	}
	runtimesGauge.WithLabelValues("evaluated").Set(float64(len(rts)))
	runtimesGauge.WithLabelValues("heard").Set(float64(heard))
	e.reporter.Round(ctx, flagged)
	roundSeconds.Observe(e.opts.Clock.Since(start).Seconds())
	return nil
}

// decide is a runtime's flag now: its SKR webhook configuration first (a
// runtime can be heard without being watched), then silence and its
// diagnosis, then a manager whose deliveries fail — of the managers the
// runtime's SKR carries a webhook of (Runtime.Managers): a report speaks
// for no other manager; the managers it names beyond those are counted
// once per report.
func (e *Evaluator) decide(rt Runtime, st *state, now time.Time) Finding {
	if !st.config.Healthy() {
		return st.config
	}
	if st.silent {
		if st.diagnosis.Healthy() {
			return Finding{Cause: CauseNothingHeard}
		}
		return st.diagnosis
	}
	last, failing, ok := e.tracker.Last(rt.ID)
	if !ok {
		return Finding{}
	}
	if !last.Equal(st.judged) {
		st.judged = last
		n := 0
		for _, m := range failing {
			if !rt.Managers[m.Name] {
				n++
			}
		}
		if n > 0 {
			managersIgnored.Add(float64(n))
			e.log.V(1).Info("health report names managers whose webhooks its runtime does not carry: ignored", "runtime", rt.ID, "managers", n)
		}
	}
	// The longest failing manager comes first. A transport failure is
	// stale once a report came through the same gateway: the manager's
	// next retry (the webhook expedites them) ends its streak.
	for _, m := range failing {
		if m.Result == "transport" || !rt.Managers[m.Name] {
			continue
		}
		if time.Duration(m.FailingSeconds)*time.Second+now.Sub(last) < e.opts.DeliveryGrace {
			return Finding{}
		}
		c := CauseDeliveryFailing
		if m.Result == "404" {
			c = CauseNoRoute
		}
		return Finding{Cause: c, Manager: m.Name, Detail: "every delivery fails, the last with " + m.Result}
	}
	return Finding{}
}

func outcome(f Finding, err error) string {
	switch {
	case err != nil:
		return "error"
	case f.Healthy():
		return "ok"
	}
	return "found"
}

func transitionLabel(f Finding) string {
	if f.Healthy() {
		return "recovered"
	}
	return string(f.Cause)
}
