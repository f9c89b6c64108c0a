// Package cafile is ext-authz's --ca-file, a PEM bundle of CA certificates
// (filewatch.ParseCABundle), reloaded while ext-authz runs by a
// filewatch.Watcher (docs/certificates.md: during a runtime CA rotation the
// bundle holds the old and the new CA, then only the new one), with its
// metrics.
//
// A new file is used only when it is a usable bundle; anything else —
// unreadable, garbage, no certificate, a certificate that does not parse or
// is not a CA, only expired CAs — keeps the bundle in use, is logged once
// per distinct content or error, and counted in
// runtime_watcher_ext_authz_ca_reloads_total{result="error"}.
package cafile

import (
	"context"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// Results of a reload (label "result" of runtime_watcher_ext_authz_ca_reloads_total).
const (
	ResultOK    = "ok"
	ResultError = "error"
)

// Metrics of the CA file.
type Metrics struct {
	reloads  *prometheus.CounterVec
	notAfter prometheus.Gauge
	cas      prometheus.Gauge
	valid    prometheus.Gauge
}

// NewMetrics creates the metrics and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "ca_reloads_total",
			Help: "Reloads of --ca-file after a change of its content: ok (the new CA bundle is in use) or error (unusable; the bundle before stays in use).",
		}, []string{"result"}),
		notAfter: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "ca_bundle_not_after_seconds",
			Help: "Earliest not-after (Unix seconds) of the CAs of the --ca-file bundle in use.",
		}),
		cas: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "ca_bundle_certificates",
			Help: "CA certificates in the --ca-file bundle in use.",
		}),
		valid: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "runtime_watcher", Subsystem: "ext_authz", Name: "ca_file_valid",
			Help: "1 when the content of --ca-file is the CA bundle in use, 0 when it is unusable (the bundle before stays in use).",
		}),
	}
	for _, c := range []prometheus.Collector{m.reloads, m.notAfter, m.cas, m.valid} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	m.reloads.WithLabelValues(ResultOK)
	m.reloads.WithLabelValues(ResultError)
	return m, nil
}

// loaded records the bundle in use.
func (m *Metrics) loaded(b *filewatch.CABundle) {
	if m == nil {
		return
	}
	m.notAfter.Set(float64(b.NotAfter.Unix()))
	m.cas.Set(float64(len(b.CAs)))
	m.valid.Set(1)
}

func (m *Metrics) reloaded(ok bool) {
	if m == nil {
		return
	}
	if ok {
		m.reloads.WithLabelValues(ResultOK).Inc()
		return
	}
	m.reloads.WithLabelValues(ResultError).Inc()
	m.valid.Set(0)
}

// DefaultInterval is the Watcher's default poll interval.
const DefaultInterval = filewatch.DefaultInterval

// Watcher reloads the CA file. Set the fields, then call Init and Run.
type Watcher struct {
	// Path of the CA file.
	Path string
	// Apply is called with every new bundle: swap the roots there
	// (pinning.Verifier.SetRoots).
	Apply func(*filewatch.CABundle)
	// Interval between re-reads of the file besides its events;
	// DefaultInterval when 0.
	Interval time.Duration
	Metrics  *Metrics
	Log      logr.Logger
	// Now is time.Now when nil.
	Now func() time.Time

	// pollOnly: no file events (tests).
	pollOnly bool

	once    sync.Once
	fw      *filewatch.Watcher
	mu      sync.Mutex
	current *filewatch.CABundle
}

func (w *Watcher) watcher() *filewatch.Watcher {
	w.once.Do(func() {
		w.fw = &filewatch.Watcher{Name: "CA file", Paths: []string{w.Path}, Interval: w.Interval, Log: w.Log, Load: w.load,
			Report: func(o filewatch.Outcome, _ error) {
				switch o {
				case filewatch.Loaded:
					w.Metrics.reloaded(true)
				case filewatch.Failed:
					w.Metrics.reloaded(false)
				case filewatch.InUseAgain:
					w.Metrics.loaded(w.Current())
				}
			}}
		w.fw.PollOnly = w.pollOnly
	})
	return w.fw
}

func (w *Watcher) load(contents [][]byte) error {
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	b, err := filewatch.ParseCABundle(contents[0], now)
	if err != nil {
		return err
	}
	w.mu.Lock()
	w.current = b
	w.mu.Unlock()
	w.Apply(b)
	w.Metrics.loaded(b)
	w.Log.Info("CA bundle in use", "file", w.Path, "cas", b.Summary(), "expired", b.Expired,
		"earliestNotAfter", b.NotAfter.UTC().Format(time.RFC3339))
	return nil
}

// Init loads the file: an error when it is not a usable bundle.
func (w *Watcher) Init() error { return w.watcher().Init() }

// Current is the bundle in use.
func (w *Watcher) Current() *filewatch.CABundle {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Run watches until ctx ends (filewatch.Watcher.Run), with the Path,
// Interval and poll mode set when it starts.
func (w *Watcher) Run(ctx context.Context) error {
	fw := w.watcher()
	fw.Paths, fw.Interval, fw.PollOnly = []string{w.Path}, w.Interval, w.pollOnly
	return fw.Run(ctx)
}

// Reload reads the file once and applies it when it changed and is usable;
// it reports whether a new bundle was applied.
func (w *Watcher) Reload() bool { return w.watcher().Reload() }
