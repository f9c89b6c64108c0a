// Package ratelimit is ext-authz's fair share per runtime
// (docs/architecture.md, "Edge protection per identity"): a token bucket per
// pinned runtime, decided in process after SAN pinning allowed the request,
// so a runtime that posts too much is answered 429 with Retry-After and
// cannot crowd out the others.
//
// Each bucket is one int64, the GCRA "theoretical arrival time" (the time at
// which the bucket would be full again): a runtime may send burst requests
// at once and rate requests per second after that. A bucket whose time has
// passed is full, which is the same as no bucket, so idle buckets are
// deleted (Sweep) without knowing the rate they were kept at. Buckets live
// in shards (a mutex and a map each) with a bound on the total: a runtime
// arriving at a full shard evicts an idle bucket of it, else any one
// (counted). Memory is therefore bounded whatever the number of runtimes
// (BenchmarkMemory: bytes per runtime at 100,000 runtimes).
//
// Limits are per runtime class (the value of a Kyma label, see Config), a
// default for every other runtime. In shadow mode a runtime over its limit
// is allowed, and counted and named like a limited one. The runtimes most
// often over their limit are kept in a small bounded table and named in the
// decision log every report interval (Report); metrics never carry a
// runtime.
package ratelimit

import (
	"hash/maphash"
	"math"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Modes of the limiter.
const (
	ModeOff     = "off"     // no limiter: no cost per Check
	ModeShadow  = "shadow"  // decide and count, but allow
	ModeEnforce = "enforce" // answer 429 over the limit
)

// Limit is the fair share of one runtime: Burst requests at once, Rate
// requests per second after that.
type Limit struct {
	Rate  float64
	Burst int
}

// Defaults. A healthy runtime sends far below DefaultRate (its webhook's
// health reports every 30 s, heartbeats every 5 min per manager, and one
// event per object change, at most one per object per second); its largest
// burst is a webhook replica recovering after a KCP outage with its queue
// full: skr-webhook's --queue-size, 10,000 events by default
// (docs/performance.md, "skr-webhook delivery"), which DefaultBurst lets
// through at once (a second replica's backlog follows at DefaultRate,
// deferred by Retry-After, none lost). Refilling the burst takes 100 s, so
// over time a runtime gets DefaultRate: about 1 % of one ext-authz
// replica's Checks on 2 cores (docs/performance.md).
const (
	DefaultRate           = 100
	DefaultBurst          = 10_000
	DefaultMaxRuntimes    = 200_000
	DefaultReportInterval = time.Minute
	// TopOffenders is how many runtimes a report names at most.
	TopOffenders = 10
	// maxOffenders bounds the table the report is drawn from.
	maxOffenders = 1024
	shards       = 64
)

// Config of a Limiter.
type Config struct {
	// Mode is ModeShadow or ModeEnforce (ModeOff: do not make a Limiter).
	Mode string
	// Default applies to every runtime whose class has no limit of its own.
	Default Limit
	// Classes are the limits by class (the value of the Kyma label ext-authz
	// reads the class from).
	Classes map[string]Limit
	// MaxRuntimes bounds the buckets kept (DefaultMaxRuntimes when 0).
	MaxRuntimes int
	// Registerer takes the metrics (none when nil).
	Registerer prometheus.Registerer
}

// params are a Limit in the units the buckets use.
type params struct {
	interval int64 // nanoseconds per request (1/rate)
	window   int64 // burst·interval: how far ahead of now a bucket may be
}

func paramsOf(l Limit) params {
	iv := int64(math.Ceil(float64(time.Second) / l.Rate))
	iv = max(iv, 1)
	return params{interval: iv, window: iv * int64(max(l.Burst, 1))}
}

// Limiter decides whether a runtime is within its limit. Its methods are
// safe for concurrent use.
type Limiter struct {
	shadow   bool
	def      params
	classes  map[string]params // read only after New
	perShard int
	epoch    time.Time
	seed     maphash.Seed
	shards   [shards]shard

	offMu     sync.Mutex
	offenders map[string]uint64 // refusals since the last report, bounded
	offOthers uint64            // refusals of runtimes the table had no room for

	count     atomic.Int64
	evictions prometheus.Counter
}

type shard struct {
	mu sync.Mutex
	// tat: per runtime, the nanoseconds since epoch at which its bucket is
	// full again (GCRA's theoretical arrival time).
	tat map[string]int64
	_   [40]byte // keeps shards on separate cache lines
}

// New returns a Limiter for the config; the caller has validated the limits
// (ParseClasses, Validate).
func New(c Config) (*Limiter, error) {
	if err := c.Default.Validate(); err != nil {
		return nil, err
	}
	l := &Limiter{
		shadow:    c.Mode == ModeShadow,
		def:       paramsOf(c.Default),
		classes:   make(map[string]params, len(c.Classes)),
		perShard:  max((cmpOr(c.MaxRuntimes, DefaultMaxRuntimes)+shards-1)/shards, 1),
		epoch:     time.Now(),
		seed:      maphash.MakeSeed(),
		offenders: map[string]uint64{},
	}
	for name, lim := range c.Classes {
		if err := lim.Validate(); err != nil {
			return nil, err
		}
		l.classes[name] = paramsOf(lim)
	}
	for i := range l.shards {
		l.shards[i].tat = map[string]int64{}
	}
	l.evictions = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "rate_limit_evictions_total",
		Help: "Buckets of runtimes still below their full burst removed because the bound on buckets (--rate-limit-max-runtimes) was reached; such a runtime starts again with a full burst.",
	})
	if c.Registerer != nil {
		buckets := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "rate_limit_buckets",
			Help: "Runtimes with a bucket that is not full (idle ones are removed).",
		}, func() float64 { return float64(l.count.Load()) })
		for _, col := range []prometheus.Collector{l.evictions, buckets} {
			if err := c.Registerer.Register(col); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

func cmpOr(a, b int) int {
	if a > 0 {
		return a
	}
	return b
}

// Shadow reports whether a runtime over its limit is allowed (only counted).
func (l *Limiter) Shadow() bool { return l.shadow }

// Allow takes one request of runtime (of class class, "" for none) at now.
// It returns ok=false when the runtime is over its limit, with how long it
// should wait before its next request is allowed. Allow allocates only the
// first time a runtime has no bucket.
func (l *Limiter) Allow(runtime, class string, now time.Time) (ok bool, retryAfter time.Duration) {
	p := l.def
	if class != "" {
		if cp, found := l.classes[class]; found {
			p = cp
		}
	}
	t := int64(now.Sub(l.epoch))
	s := &l.shards[maphash.String(l.seed, runtime)&(shards-1)]
	s.mu.Lock()
	tat, found := s.tat[runtime]
	if !found || tat < t {
		tat = t // a full bucket
	}
	next := tat + p.interval
	if next-t > p.window {
		s.mu.Unlock()
		l.offend(runtime)
		return false, time.Duration(next - t - p.window)
	}
	if found {
		s.tat[runtime] = next
	} else {
		l.insert(s, strings.Clone(runtime), next, t)
	}
	s.mu.Unlock()
	return true, 0
}

// insert adds a bucket to s (s.mu held), making room first: idle buckets
// of the shard go, else any one (counted).
func (l *Limiter) insert(s *shard, runtime string, tat, now int64) {
	if len(s.tat) >= l.perShard {
		l.sweepShard(s, now)
		for k := range s.tat {
			if len(s.tat) < l.perShard {
				break
			}
			delete(s.tat, k)
			l.count.Add(-1)
			l.evictions.Inc()
		}
	}
	s.tat[runtime] = tat
	l.count.Add(1)
}

// sweepShard deletes the shard's full buckets (s.mu held).
func (l *Limiter) sweepShard(s *shard, now int64) {
	for k, tat := range s.tat {
		if tat <= now {
			delete(s.tat, k)
			l.count.Add(-1)
		}
	}
}

// Sweep deletes every bucket that is full at now (an idle runtime's); it
// holds one shard's lock at a time. Run calls it every report interval.
func (l *Limiter) Sweep(now time.Time) {
	t := int64(now.Sub(l.epoch))
	for i := range l.shards {
		s := &l.shards[i]
		s.mu.Lock()
		l.sweepShard(s, t)
		s.mu.Unlock()
	}
}

// Len is the number of buckets kept.
func (l *Limiter) Len() int { return int(l.count.Load()) }

// offend counts a refusal of runtime in the bounded offenders table.
func (l *Limiter) offend(runtime string) {
	l.offMu.Lock()
	defer l.offMu.Unlock()
	if n, ok := l.offenders[runtime]; ok {
		l.offenders[runtime] = n + 1
		return
	}
	if len(l.offenders) >= maxOffenders {
		l.offOthers++
		return
	}
	l.offenders[strings.Clone(runtime)] = 1
}

// Offender is a runtime and how many of its requests were over its limit.
type Offender struct {
	Runtime string
	Over    uint64
}

// Report returns the runtimes most often over their limit since the last
// report, most first (at most TopOffenders), and how many refusals the
// others had; it starts the next period.
func (l *Limiter) Report() (top []Offender, others uint64) {
	l.offMu.Lock()
	all := make([]Offender, 0, len(l.offenders))
	for r, n := range l.offenders {
		all = append(all, Offender{Runtime: r, Over: n})
	}
	others = l.offOthers
	clear(l.offenders)
	l.offOthers = 0
	l.offMu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].Over != all[j].Over {
			return all[i].Over > all[j].Over
		}
		return all[i].Runtime < all[j].Runtime
	})
	if len(all) > TopOffenders {
		for _, o := range all[TopOffenders:] {
			others += o.Over
		}
		all = all[:TopOffenders]
	}
	return all, others
}

// EvictionsCounter is the counter of buckets evicted for room (tests).
func (l *Limiter) EvictionsCounter() prometheus.Counter { return l.evictions }
