package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// SendHealth posts one health report to contract.HealthPath; ctx bounds the
// attempt. The answer is classified as for events; a 2xx answer's body is
// the KCP's contract.HealthAnswer (none or unreadable: the zero answer).
func (s *HTTPSender) SendHealth(ctx context.Context, r contract.HealthReport) (Result, contract.HealthAnswer) {
	body, err := json.Marshal(r)
	if err != nil {
		return Result{Outcome: Rejected, Err: err}, contract.HealthAnswer{}
	}
	u := s.base
	u.Path = contract.HealthPath
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return Result{Outcome: Rejected, Err: err}, contract.HealthAnswer{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := s.client().Do(req)
	if err != nil {
		return Result{Outcome: Retriable, Err: err}, contract.HealthAnswer{}
	}
	answer, _ := io.ReadAll(io.LimitReader(resp.Body, contract.MaxHealthAnswerBytes))
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	res := Result{Status: resp.StatusCode, Outcome: Retriable}
	var a contract.HealthAnswer
	switch {
	case resp.StatusCode >= 200 && resp.StatusCode < 300:
		res.Outcome = Delivered
		if len(answer) > 0 {
			_ = json.Unmarshal(answer, &a) // unreadable: no resync asked
		}
		return res, a
	case BadBody(resp.StatusCode):
		res.Outcome = Rejected
	}
	res.Err = fmt.Errorf("kcp answered %d: %q", resp.StatusCode, answer)
	return res, a
}

// HealthSender sends one health report (HTTPSender in the binary).
type HealthSender interface {
	SendHealth(ctx context.Context, r contract.HealthReport) (Result, contract.HealthAnswer)
}

// HealthConfig of a HealthReporter.
type HealthConfig struct {
	// Interval between two reports (docs/architecture.md §4.12).
	Interval time.Duration
	// Attempts per report (default 8): a report answered 421 (a replica
	// that does not evaluate health) is tried again after RetryDelay
	// (default 250 ms), up to this many times; any other failure waits
	// for the next interval.
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
	d        Resyncer
	log      logr.Logger
	attempts *prometheus.CounterVec
	// lost: the last report was not taken (the path may have lost reviews).
	lost bool
}

// Resyncer is what the reporter needs of the Dispatcher.
type Resyncer interface {
	FailingManagers() []contract.ManagerDelivery
	Managers() []string
	Resync(manager string, reason contract.ResyncReason)
	// Recovered: the path works again; what waits for its backoff goes
	// now, and the failing streaks of the outage are forgotten.
	Recovered()
}

// NewHealthReporter reports d's failing managers through sender and asks d
// for a "recovered" resync of every manager when the path works again: a
// report taken after one that was not, or the KCP's answer asking for it
// (it had flagged the runtime, e.g. for a missing webhook configuration,
// while this webhook was heard).
func NewHealthReporter(cfg HealthConfig, sender HealthSender, d Resyncer, log logr.Logger) *HealthReporter {
	if cfg.Attempts < 1 {
		cfg.Attempts = 8
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 250 * time.Millisecond
	}
	if cfg.AttemptTimeout <= 0 {
		cfg.AttemptTimeout = DefaultAttemptTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	h := &HealthReporter{cfg: cfg, sender: sender, d: d, log: log,
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
// KCP took it. Not run concurrently (Run calls it).
func (h *HealthReporter) Report(ctx context.Context) bool {
	var r contract.HealthReport
	if !h.lost {
		// After an outage every manager's streak is the outage's: the
		// report that ends it names none.
		r.Managers = h.d.FailingManagers()
	}
	for attempt := 1; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, h.cfg.AttemptTimeout)
		res, answer := h.sender.SendHealth(actx, r)
		cancel()
		h.attempts.WithLabelValues(ResultClass(res)).Inc()
		if res.Outcome == Delivered {
			if h.lost || answer.Resync {
				h.log.Info("watch path works again: requesting a resync of every manager", "afterFailedReport", h.lost, "askedByKCP", answer.Resync)
				for _, m := range h.d.Managers() {
					h.d.Resync(m, contract.ResyncRecovered)
				}
				// What waits for its backoff need not wait up to
				// --retry-max-delay more.
				h.d.Recovered()
			}
			h.lost = false
			return true
		}
		// Only a 421 is tried again at once: another replica takes it. Any
		// other failure is the path's; the next interval tries again.
		if attempt >= h.cfg.Attempts || res.Status != http.StatusMisdirectedRequest || ctx.Err() != nil {
			h.log.Info("health report not taken by the KCP", "status", res.Status, "error", errString(res.Err), "attempts", attempt)
			// A 421 came from a KCP replica that does not evaluate health:
			// the path itself works.
			h.lost = h.lost || res.Status != http.StatusMisdirectedRequest
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-h.cfg.Clock.After(h.cfg.RetryDelay):
		}
	}
}
