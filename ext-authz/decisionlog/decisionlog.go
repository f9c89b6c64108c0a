// Package decisionlog is ext-authz's decision log: one structured logr line
// per Check decision (ext-authz/README.md, "Decision log"). Every refusal is
// logged, allows are sampled at a configurable rate, and all lines together
// are bounded in lines per second, so a flood of Checks cannot fill a disk;
// a line that the bound drops is counted in
// runtime_watcher_ext_authz_decision_log_dropped_total.
//
// The line carries the certificate's SHA-256 fingerprint, never the
// certificate. Deciding whether an allow is sampled is one call of the
// runtime's per-thread random generator: an allow that is not sampled costs
// no allocation and no lock.
package decisionlog

import (
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// Defaults of the flags.
const (
	DefaultAllowSampleRate = 0.01
	DefaultMaxLinesPerSec  = 100
)

// Options configure a Log.
type Options struct {
	// AllowSampleRate is the fraction of allows logged, 0 (none) to 1 (all).
	AllowSampleRate float64
	// MaxLinesPerSecond bounds the lines written (refusals and sampled
	// allows together; bursts up to the same number). 0 turns the log off.
	MaxLinesPerSecond int
}

// Validate checks the ranges.
func (o Options) Validate() error {
	if math.IsNaN(o.AllowSampleRate) || o.AllowSampleRate < 0 || o.AllowSampleRate > 1 {
		return fmt.Errorf("allow sample rate %v: want 0 to 1", o.AllowSampleRate)
	}
	if o.MaxLinesPerSecond < 0 || o.MaxLinesPerSecond > 100_000 {
		return fmt.Errorf("max lines per second %d: want 0 to 100000", o.MaxLinesPerSecond)
	}
	return nil
}

// Entry is one decision.
type Entry struct {
	Mode        string // enforce or dry-run
	Result      string // allow, deny, unavailable
	Reason      string // deny reason; "" for an allow
	Runtime     string // the certificate's CN once decoded (not trusted on a refusal)
	Fingerprint [32]byte
	Path        string
	RequestID   string
	TraceID     string // ext-authz's own trace of the Check (with tracing)
	// SenderTraceID is the trace ID of the request's traceparent, when
	// present: the sender's trace, which the Check links to; never the
	// Check's own.
	SenderTraceID string
	Message       string // why it was refused
	Duration      time.Duration
	Err           error // a failed lookup
}

// Log writes decision lines. A nil *Log logs nothing.
type Log struct {
	log       logr.Logger
	threshold uint64 // an allow is sampled when a random uint64 is below it
	all       bool   // AllowSampleRate 1
	limiter   *rate.Limiter
	dropped   prometheus.Counter
	lines     *prometheus.CounterVec
	now       func() time.Time // the limiter's clock (tests set it)
}

// New returns the Log, registering its metrics with reg; nil (log nothing)
// when o.MaxLinesPerSecond is 0.
func New(o Options, log logr.Logger, reg prometheus.Registerer) (*Log, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.MaxLinesPerSecond == 0 {
		return nil, nil
	}
	l := &Log{
		log:     log,
		now:     time.Now,
		all:     o.AllowSampleRate >= 1,
		limiter: rate.NewLimiter(rate.Limit(o.MaxLinesPerSecond), o.MaxLinesPerSecond),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "decision_log_dropped_total",
			Help: "Decision log lines not written because the lines-per-second bound was reached.",
		}),
		lines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "decision_log_lines_total",
			Help: "Decision log lines written, by result.",
		}, []string{"result"}),
	}
	if !l.all {
		l.threshold = uint64(o.AllowSampleRate * (1 << 64))
	}
	for _, c := range []prometheus.Collector{l.dropped, l.lines} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// SampleAllow reports whether this allow is logged (no allocation, no lock).
func (l *Log) SampleAllow() bool {
	if l == nil {
		return false
	}
	return l.all || l.threshold > 0 && rand.Uint64() < l.threshold
}

// Enabled reports whether lines are written at all.
func (l *Log) Enabled() bool { return l != nil }

// Write writes e unless the lines-per-second bound is reached (then it is
// counted as dropped). Failed lookups are logged as errors, the rest at info.
func (l *Log) Write(e *Entry) {
	if l == nil {
		return
	}
	if !l.limiter.AllowN(l.now(), 1) {
		l.dropped.Inc()
		return
	}
	l.lines.WithLabelValues(e.Result).Inc()
	kv := make([]any, 0, 22)
	kv = append(kv, "mode", e.Mode, "result", e.Result)
	if e.Reason != "" {
		kv = append(kv, "reason", e.Reason)
	}
	if e.Runtime != "" {
		kv = append(kv, "runtime", contract.Bounded(e.Runtime))
	}
	if e.Fingerprint != ([32]byte{}) {
		kv = append(kv, "certSHA256", hex.EncodeToString(e.Fingerprint[:]))
	}
	// Every field a client chose (the path, up to the gateway's header
	// limit; the request ID; the certificate's CN) is cut to
	// contract.MaxText with a marker.
	kv = append(kv, "path", contract.Bounded(e.Path), "durationSeconds", e.Duration.Seconds())
	if e.RequestID != "" {
		kv = append(kv, "requestID", contract.Bounded(e.RequestID))
	}
	if e.TraceID != "" {
		kv = append(kv, "traceID", contract.Bounded(e.TraceID))
	}
	if e.SenderTraceID != "" {
		kv = append(kv, "senderTraceID", contract.Bounded(e.SenderTraceID))
	}
	if e.Message != "" {
		kv = append(kv, "message", contract.Bounded(e.Message))
	}
	if e.Err != nil {
		l.log.Error(e.Err, "Check decision", kv...)
		return
	}
	l.log.Info("Check decision", kv...)
}
