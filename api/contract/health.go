package contract

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
)

// HealthPath is where an skr-webhook posts its runtime's health report, once
// per runtime every --health-interval (docs/architecture.md §4.12), through
// the same gateway, certificate and ext-authz as its events. It is not an
// event path (/v2/<manager>/event), so no Watcher's route can claim it; the
// KCP routes it to vs-controller.
const HealthPath = "/v2/runtime-watcher/health"

// Bounds of a health report.
const (
	// MaxHealthReportBytes bounds the body.
	MaxHealthReportBytes = 8 << 10
	// MaxHealthManagers bounds the failing managers one report names (the
	// webhook sends those failing longest first).
	MaxHealthManagers = 32
	// MaxFailingSeconds caps FailingSeconds (a year).
	MaxFailingSeconds = 365 * 24 * 3600
)

// DeliveryClasses are the result classes of one delivery attempt, as the
// skr-webhook counts them (its attempts metric's "result" label): the 2xx,
// 3xx and 5xx families, the 4xx statuses the delivery rules name, "4xx" for
// other client errors, "transport" for no answer and "invalid" for an event
// that could not be sent.
var DeliveryClasses = []string{"2xx", "3xx", "400", "403", "404", "408", "413", "415", "422", "425", "429", "4xx", "5xx",
	"transport", "invalid"}

// HealthReport is the body of POST HealthPath: the sender's runtime (its
// certificate, as for events) is alive and reaches the KCP, and these of its
// managers' deliveries fail. A report with no managers: every delivery works
// or none was tried.
type HealthReport struct {
	Managers []ManagerDelivery `json:"managers,omitempty"`
}

// ManagerDelivery is one manager whose deliveries have all failed for
// FailingSeconds, the last with result class Result (a DeliveryClasses
// entry, never "2xx").
type ManagerDelivery struct {
	Name           string `json:"name"`
	Result         string `json:"result"`
	FailingSeconds int64  `json:"failingSeconds"`
}

// HealthAnswer is the KCP's 200 answer to a health report (a 204 has none):
// Resync asks the webhook for a "recovered" resync of every manager, as the
// KCP had flagged the runtime's path broken and now sees it work.
type HealthAnswer struct {
	Resync bool `json:"resync,omitempty"`
}

// MaxHealthAnswerBytes bounds the answer the webhook reads.
const MaxHealthAnswerBytes = 1 << 10

// ParseHealthReport decodes and checks a report: at most
// MaxHealthReportBytes, known keys only, at most MaxHealthManagers managers,
// each a valid manager name named once, a known failing result class and
// FailingSeconds in [0, MaxFailingSeconds].
func ParseHealthReport(b []byte) (HealthReport, error) {
	var r HealthReport
	if len(b) > MaxHealthReportBytes {
		return r, fmt.Errorf("health report over %d bytes", MaxHealthReportBytes)
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return HealthReport{}, fmt.Errorf("health report: %w", err)
	}
	if dec.More() {
		return HealthReport{}, errors.New("health report: data after the object")
	}
	if len(r.Managers) > MaxHealthManagers {
		return HealthReport{}, fmt.Errorf("health report: over %d managers", MaxHealthManagers)
	}
	seen := make(map[string]bool, len(r.Managers))
	for _, m := range r.Managers {
		switch {
		case !ValidManager(m.Name):
			return HealthReport{}, errors.New("health report: invalid manager name")
		case seen[m.Name]:
			return HealthReport{}, errors.New("health report: manager named twice")
		case m.Result == "2xx" || !slices.Contains(DeliveryClasses, m.Result):
			return HealthReport{}, errors.New("health report: unknown failing result class")
		case m.FailingSeconds < 0 || m.FailingSeconds > MaxFailingSeconds:
			return HealthReport{}, errors.New("health report: failingSeconds out of range")
		}
		seen[m.Name] = true
	}
	return r, nil
}
