package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// SendHealth posts one health report to contract.HealthPath; ctx bounds the
// attempt. The answer is classified as for events.
func (s *HTTPSender) SendHealth(ctx context.Context, r contract.HealthReport) Result {
	body, err := json.Marshal(r)
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	u := s.base
	u.Path = contract.HealthPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: Rejected, Err: err}
	}
	req.Header.Set("Content-Type", "application/json")
	return s.do(req)
}

// HealthSender sends one health report (HTTPSender in the binary).
type HealthSender interface {
	SendHealth(ctx context.Context, r contract.HealthReport) Result
}

// HealthConfig of a HealthReporter.
type HealthConfig struct {
	// Interval between two reports (docs/architecture.md §4.12).
	Interval time.Duration
	// Attempts per report: a report the KCP does not take (a replica that
	// does not evaluate health answers 503) is tried again after
	// RetryDelay, up to this many times, within the interval.
	Attempts   int
	RetryDelay time.Duration
	// AttemptTimeout bounds one attempt.
	AttemptTimeout time.Duration
	Registerer     prometheus.Registerer
	Clock          clock.WithTicker
}

// HealthReporter tells the KCP, once per runtime every interval, that this
// runtime's webhook is alive and reaches it, and which of its managers'
// deliveries fail (Dispatcher.FailingManagers). It is not queued: a report
// that could not be sent is counted, and the next one follows an interval
// later. The KCP flags the runtime when it hears nothing for three
// intervals (vs-controller/health).
type HealthReporter struct {
	cfg      HealthConfig
	sender   HealthSender
	failing  func() []contract.ManagerDelivery
	log      logr.Logger
	attempts *prometheus.CounterVec
}

// NewHealthReporter reports failing() through sender.
func NewHealthReporter(cfg HealthConfig, sender HealthSender, failing func() []contract.ManagerDelivery, log logr.Logger) *HealthReporter {
	if cfg.Attempts < 1 {
		cfg.Attempts = 3
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	h := &HealthReporter{cfg: cfg, sender: sender, failing: failing, log: log,
		attempts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "runtime_watcher_skr_webhook_health_reports_total",
			Help: "Health report attempts (one report per runtime every --health-interval) by result class, as for deliveries.",
		}, []string{"result"})}
	for _, c := range contract.DeliveryClasses {
		h.attempts.WithLabelValues(c)
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.attempts)
	}
	return h
}

// Run reports at once and then every interval until ctx ends.
func (h *HealthReporter) Run(ctx context.Context) {
	t := h.cfg.Clock.NewTicker(h.cfg.Interval)
	defer t.Stop()
	for {
		h.Report(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

// Report sends one report, retrying as configured; it returns whether the
// KCP took it.
func (h *HealthReporter) Report(ctx context.Context) bool {
	r := contract.HealthReport{Managers: h.failing()}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, h.cfg.AttemptTimeout)
		res := h.sender.SendHealth(actx, r)
		cancel()
		h.attempts.WithLabelValues(ResultClass(res)).Inc()
		if res.Outcome == Delivered {
			return true
		}
		if attempt >= h.cfg.Attempts || res.Outcome == Rejected || ctx.Err() != nil {
			h.log.Info("health report not taken by the KCP", "status", res.Status, "error", errString(res.Err), "attempts", attempt)
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-h.cfg.Clock.After(h.cfg.RetryDelay):
		}
	}
}
