// Package cafile loads ext-authz's --ca-file, a PEM bundle of CA
// certificates, and reloads it while ext-authz runs (docs/certificates.md:
// during a runtime CA rotation the bundle holds the old and the new CA, then
// only the new one).
//
// A Watcher watches the file's directory with fsnotify (inotify on Linux):
// a Kubernetes Secret or ConfigMap volume is updated by kubelet writing a new
// timestamped directory and atomically renaming the symlink ..data to it, so
// the file (a symlink through ..data) itself never changes and a watch on it
// would see nothing or be lost; events in the directory are seen. It also
// re-reads the file every Interval, so a missed event (or a directory that
// cannot be watched) delays a reload by at most Interval. A file whose
// content did not change is not parsed again.
//
// A new file is used only when it is a usable bundle (see Parse); anything
// else — unreadable, garbage, no certificate, a certificate that does not
// parse or is not a CA, only expired CAs — keeps the bundle in use, is logged
// once per distinct content or error, and counted in
// runtime_watcher_ext_authz_ca_reloads_total{result="error"}.
package cafile

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// Bundle is a parsed CA file.
type Bundle struct {
	// Pool holds every CA of the file; it is not modified after Parse.
	Pool *x509.CertPool
	// CAs in the order of the file.
	CAs []*x509.Certificate
	// NotAfter is the earliest not-after of the CAs (when the first of them
	// expires).
	NotAfter time.Time
	// Expired counts the CAs already expired when parsed (kept in Pool:
	// verification refuses them anyway).
	Expired int
	// SHA256 of the file's content.
	SHA256 [sha256.Size]byte
}

// Summary is a short description for logs: the CAs' subjects and not-after.
func (b *Bundle) Summary() []string {
	out := make([]string, 0, len(b.CAs))
	for _, c := range b.CAs {
		out = append(out, fmt.Sprintf("%s (not after %s, SHA-256 %s)", c.Subject.String(),
			c.NotAfter.UTC().Format(time.RFC3339), fingerprint(c)))
	}
	return out
}

func fingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return hex.EncodeToString(sum[:8])
}

// Parse reads a PEM bundle of CA certificates. It fails when the data holds
// no PEM CERTIFICATE block, a PEM block of another type (a private key put
// into the wrong file), a certificate that does not parse or is not a CA
// (basic constraints CA:TRUE), or only CAs that expired at now. Text between
// PEM blocks (openssl's "subject=" lines) is ignored. A CA not valid yet is
// accepted: it becomes valid without the file changing.
func Parse(data []byte, now time.Time) (*Bundle, error) {
	b := &Bundle{Pool: x509.NewCertPool(), SHA256: sha256.Sum256(data)}
	rest := data
	for {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("PEM block %d is a %q, want only CERTIFICATE blocks", len(b.CAs)+1, block.Type)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", len(b.CAs)+1, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, fmt.Errorf("certificate %d (%s) is not a CA certificate", len(b.CAs)+1, c.Subject)
		}
		if now.After(c.NotAfter) {
			b.Expired++
		}
		if b.NotAfter.IsZero() || c.NotAfter.Before(b.NotAfter) {
			b.NotAfter = c.NotAfter
		}
		b.Pool.AddCert(c)
		b.CAs = append(b.CAs, c)
	}
	switch {
	case len(b.CAs) == 0:
		return nil, errors.New("no PEM certificate in it")
	case b.Expired == len(b.CAs):
		return nil, fmt.Errorf("every CA in it expired (the last at %s)", latestNotAfter(b.CAs).UTC().Format(time.RFC3339))
	}
	return b, nil
}

// UsableAt reports whether a CA of the bundle is still valid at t (not
// expired; a CA not valid yet counts, as in Parse).
func (b *Bundle) UsableAt(t time.Time) bool {
	return b != nil && !t.After(latestNotAfter(b.CAs))
}

func latestNotAfter(cas []*x509.Certificate) time.Time {
	var t time.Time
	for _, c := range cas {
		if c.NotAfter.After(t) {
			t = c.NotAfter
		}
	}
	return t
}

// Load reads and parses the file at path.
func Load(path string, now time.Time) (*Bundle, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(data, now)
}

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
func (m *Metrics) loaded(b *Bundle) {
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
const DefaultInterval = 10 * time.Second

// debounce: a reload waits this long after the last file event, so a writer
// that truncates and writes in place is read once it is done.
const debounce = 100 * time.Millisecond

// Watcher reloads a CA file. Set the fields, then call Run.
type Watcher struct {
	// Path of the CA file.
	Path string
	// Initial is the bundle in use when Run starts (Load of Path).
	Initial *Bundle
	// Apply is called with every new bundle, from Run's goroutine: swap the
	// roots there (pinning.Verifier.SetRoots).
	Apply func(*Bundle)
	// Interval between re-reads of the file besides its events;
	// DefaultInterval when 0.
	Interval time.Duration
	Metrics  *Metrics
	Log      logr.Logger
	// Now is time.Now when nil.
	Now func() time.Time

	// noNotify: poll only (tests).
	noNotify bool

	mu sync.Mutex
	// current: the bundle in use; seen: the content hash or read error of
	// the last read, so an unchanged file is neither parsed nor logged again.
	current *Bundle
	seen    string
}

// Current is the bundle in use.
func (w *Watcher) Current() *Bundle {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.current == nil {
		return w.Initial
	}
	return w.current
}

// Run watches until ctx ends. It returns nil then; a directory that cannot
// be watched is logged, and the file is polled only.
func (w *Watcher) Run(ctx context.Context) error {
	if w.Interval <= 0 {
		w.Interval = DefaultInterval
	}
	w.mu.Lock()
	if w.current == nil && w.Initial != nil {
		w.current = w.Initial
		w.seen = "sha256:" + hex.EncodeToString(w.Initial.SHA256[:])
		w.Metrics.loaded(w.Initial)
	}
	w.mu.Unlock()

	var events <-chan fsnotify.Event
	var errs <-chan error
	dir := filepath.Dir(w.Path)
	if w.noNotify {
		// Polled only.
	} else if fw, err := fsnotify.NewWatcher(); err != nil {
		w.Log.Error(err, "cannot watch the CA file's directory; polling it only", "file", w.Path, "interval", w.Interval.String())
	} else {
		defer fw.Close()
		if err := fw.Add(dir); err != nil {
			w.Log.Error(err, "cannot watch the CA file's directory; polling it only", "file", w.Path, "dir", dir, "interval", w.Interval.String())
		} else {
			events, errs = fw.Events, fw.Errors
		}
	}
	w.Log.Info("watching the CA file", "file", w.Path, "dir", dir, "interval", w.Interval.String(), "fsnotify", events != nil)

	// A change between the initial load and the watch is seen by this read.
	w.Reload()
	poll := time.NewTicker(w.Interval)
	defer poll.Stop()
	settle := time.NewTimer(debounce)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
			w.Reload()
		case <-settle.C:
			w.Reload()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			w.Log.V(1).Info("CA file directory event", "event", ev.String())
			settle.Reset(debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.Log.Error(err, "watching the CA file's directory; the file is still polled", "dir", dir)
		}
	}
}

// Reload reads the file once and, when its content changed, parses it and
// applies it if it is usable. It reports whether a new bundle was applied.
func (w *Watcher) Reload() bool {
	now := time.Now()
	if w.Now != nil {
		now = w.Now()
	}
	data, err := os.ReadFile(w.Path)
	w.mu.Lock()
	defer w.mu.Unlock()
	if err != nil {
		key := "error:" + err.Error()
		if key == w.seen {
			return false
		}
		w.seen = key
		w.Metrics.reloaded(false)
		w.Log.Error(err, "CA file unreadable; keeping the CA bundle in use", "file", w.Path, "inUse", w.summary())
		return false
	}
	sum := sha256.Sum256(data)
	key := "sha256:" + hex.EncodeToString(sum[:])
	if key == w.seen {
		return false
	}
	w.seen = key
	if w.current != nil && bytes.Equal(sum[:], w.current.SHA256[:]) {
		// Back to the content in use (after an unreadable or bad file).
		w.Metrics.loaded(w.current)
		w.Log.Info("CA file holds the CA bundle in use again", "file", w.Path)
		return false
	}
	b, err := Parse(data, now)
	if err != nil {
		w.Metrics.reloaded(false)
		w.Log.Error(err, "CA file changed but is unusable; keeping the CA bundle in use", "file", w.Path, "bytes", len(data), "inUse", w.summary())
		return false
	}
	w.current = b
	w.Apply(b)
	w.Metrics.loaded(b)
	w.Metrics.reloaded(true)
	w.Log.Info("CA file reloaded; the new CA bundle is in use", "file", w.Path, "cas", b.Summary(), "expired", b.Expired,
		"earliestNotAfter", b.NotAfter.UTC().Format(time.RFC3339))
	return true
}

func (w *Watcher) summary() string {
	if w.current == nil {
		return "none"
	}
	return strings.Join(w.current.Summary(), "; ")
}
