// Package health tells, per runtime and within two minutes, that its watch
// path is broken and why (docs/architecture.md §4.12, ARCHITECTURE §3.15).
//
// Every skr-webhook posts a health report once per runtime every
// --health-interval (30 s) through the gateway, certificate and ext-authz its
// events take (contract.HealthPath); the gateway routes it to vs-controller,
// whose Tracker keeps the last report of each runtime in memory: a report
// costs no KCP write. The Evaluator, run by whoever owns the runtimes (the
// leader; a shard owner with #36), looks at every runtime every tick and
// flags it:
//   - with the SKR's webhook configuration missing or altered (a periodic
//     check, one metadata read per runtime per --health-check-interval,
//     spread over the interval),
//   - when it was not heard for --health-silence (three intervals), with the
//     cause the Prober finds (certificate expired or not yet valid, a CA the
//     gateway does not trust, a certificate ext-authz refuses: unknown
//     runtime or SAN mismatch, no ready webhook in the SKR, else nothing
//     heard: the network),
//   - when its report says a manager's deliveries have all failed for
//     --health-delivery-grace (no route: 404; else delivery failing, with
//     the answer class) — only a manager whose webhook the runtime's SKR
//     carries: a report speaks for no other (counted, not heeded).
//
// A change of a runtime's flag, and only a change, is a change of the
// flagged-runtime gauges, and is told: an Event on its Kyma (WatchPathBroken
// naming the cause, WatchPathRecovered), each Watcher's
// status.silentRuntimes patched when its count changes, a resync on
// recovery. A flag that flips is damped: each change of cause is told at
// most once per --health-event-window (5 min), and what holds when the
// window ends is told then.
package health

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sync"
	"time"

	"k8s.io/utils/clock"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// Cause names why a runtime's watch path is broken: the "cause" label of
// the metrics and the start of its Event's message.
type Cause string

// Causes, in the order the evaluation decides them.
const (
	// CauseWebhookConfigMissing: the SKR has no ValidatingWebhookConfiguration skr-webhook.
	CauseWebhookConfigMissing Cause = "webhook-config-missing"
	// CauseWebhookConfigAltered: it differs from what vs-controller applied.
	CauseWebhookConfigAltered Cause = "webhook-config-altered"
	// CauseCertificateExpired: the SKR's client certificate expired.
	CauseCertificateExpired Cause = "certificate-expired"
	// CauseCertificateNotYetValid: the SKR's client certificate is not valid yet.
	CauseCertificateNotYetValid Cause = "certificate-not-yet-valid"
	// CauseCAUntrusted: the SKR's client certificate does not chain to a CA
	// the gateway trusts (its client CA bundle).
	CauseCAUntrusted Cause = "ca-untrusted"
	// CauseUnknownRuntime: ext-authz finds no Kyma for the certificate's CN
	// (unknown-runtime).
	CauseUnknownRuntime Cause = "unknown-runtime"
	// CauseSANMismatch: the certificate lacks the Kyma's skr-domain
	// (san-mismatch, domain-not-set).
	CauseSANMismatch Cause = "san-mismatch"
	// CauseWebhookNotReady: no ready skr-webhook in the SKR.
	CauseWebhookNotReady Cause = "webhook-not-ready"
	// CauseNothingHeard: silent, and nothing the KCP can see explains it
	// (network, DNS, a firewall, the SKR's API server unreachable).
	CauseNothingHeard Cause = "nothing-heard"
	// CauseNoRoute: the runtime is heard, but its deliveries to a manager
	// get 404 (no route for the manager at the gateway).
	CauseNoRoute Cause = "no-route"
	// CauseDeliveryFailing: the runtime is heard, but its deliveries to a
	// manager fail with another answer class (5xx: the operator's listener,
	// 403: a denial, transport).
	CauseDeliveryFailing Cause = "delivery-failing"
)

// Causes lists every cause: the bounded label set of the metrics.
var Causes = []Cause{CauseWebhookConfigMissing, CauseWebhookConfigAltered, CauseCertificateExpired,
	CauseCertificateNotYetValid, CauseCAUntrusted, CauseUnknownRuntime, CauseSANMismatch,
	CauseWebhookNotReady, CauseNothingHeard, CauseNoRoute, CauseDeliveryFailing}

// Finding is a runtime's flag: no Cause when healthy. Manager is set when
// only one manager's path is broken (no-route, delivery-failing).
type Finding struct {
	Cause   Cause
	Manager string
	Detail  string
}

// Healthy reports whether f flags nothing.
func (f Finding) Healthy() bool { return f.Cause == "" }

// Message is the Event text: the cause first, then what was seen.
func (f Finding) Message() string {
	m := string(f.Cause)
	if f.Manager != "" {
		m += " (manager " + f.Manager + ")"
	}
	if f.Detail != "" {
		m += ": " + f.Detail
	}
	return m
}

// seen is what the Tracker keeps per runtime.
type seen struct {
	at      time.Time
	failing []contract.ManagerDelivery
}

// Tracker keeps, in memory only, when each runtime was last heard and its
// last report. Safe for concurrent use.
type Tracker struct {
	clock clock.PassiveClock
	max   int

	// signatures, when set, verifies ext-authz's identity signature of
	// every report (VerifyIdentity).
	signatures *assertion.Verifier

	mu     sync.Mutex
	last   map[string]seen
	resync map[string]bool // runtimes whose next report is answered "resync"
}

// NewTracker holds at most max runtimes (the Evaluator prunes those that
// are no longer runtimes); a report of one more is refused.
func NewTracker(c clock.PassiveClock, max int) *Tracker {
	if c == nil {
		c = clock.RealClock{}
	}
	return &Tracker{clock: c, max: max, last: map[string]seen{}, resync: map[string]bool{}}
}

// VerifyIdentity makes the Handler take a report only with ext-authz's
// identity signature over its runtime, SKR domain, method and path (package
// identity/assertion): a route bound to the gateway that sets
// x-watcher-runtime-id, or rewrites another path to the health path, cannot
// report for a runtime (docs/security.md, "Routes cannot speak for a
// runtime"). Call it before serving.
func (t *Tracker) VerifyIdentity(v *assertion.Verifier) { t.signatures = v }

// Observe records a report of runtime id now; ok is false when the tracker
// is full; resync is true once after RequestResync(id).
func (t *Tracker) Observe(id string, r contract.HealthReport) (ok, resync bool) {
	now := t.clock.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, known := t.last[id]; !known && len(t.last) >= t.max {
		return false, false
	}
	t.last[id] = seen{at: now, failing: r.Managers}
	resync = t.resync[id]
	delete(t.resync, id)
	return true, resync
}

// RequestResync makes the answer to runtime id's next report ask its
// webhook for a "recovered" resync: changes made while its path was broken
// may have made no event.
func (t *Tracker) RequestResync(id string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.resync[id] = true
}

// Last returns when id was last heard and what it reported.
func (t *Tracker) Last(id string) (time.Time, []contract.ManagerDelivery, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.last[id]
	return s.at, s.failing, ok
}

// Len is the number of runtimes held.
func (t *Tracker) Len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.last)
}

// Prune forgets every runtime keep rejects.
func (t *Tracker) Prune(keep func(id string) bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for id := range t.last {
		if !keep(id) {
			delete(t.last, id)
		}
	}
	for id := range t.resync {
		if !keep(id) {
			delete(t.resync, id)
		}
	}
}

// MaxRuntimes bounds the runtimes a Tracker holds in vs-controller.
const MaxRuntimes = 200000

// maxRuntimeIDBytes bounds the runtime ID header (a DNS subdomain at most).
const maxRuntimeIDBytes = 253

// Handler serves POST contract.HealthPath. The runtime is the one ext-authz
// identified (contract.HeaderRuntimeID, set from the verified client
// certificate; only the gateway reaches this port, NetworkPolicy), never
// the body. While evaluates(runtimeID) is false — a replica that does not
// own the runtime: today one that does not lead (Evaluator.Evaluates), with
// shards one that does not own it — it answers 421 Misdirected Request, and
// the webhook tries again at once (a 421 is not a broken path). A report is
// answered 204, or 200 with contract.HealthAnswer{Resync: true} once after
// RequestResync.
func (t *Tracker) Handler(evaluates func(runtimeID string) bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path != contract.HealthPath:
			reports.WithLabelValues("not-found").Inc()
			http.NotFound(w, r)
			return
		case r.Method != http.MethodPost:
			reports.WithLabelValues("method-not-allowed").Inc()
			w.Header().Set("Allow", http.MethodPost)
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		id := r.Header.Get(contract.HeaderRuntimeID)
		if id == "" || len(id) > maxRuntimeIDBytes {
			reports.WithLabelValues("no-identity").Inc()
			http.Error(w, "no runtime identity from the gateway", http.StatusUnauthorized)
			return
		}
		if t.signatures != nil {
			if _, err := t.signatures.VerifyRequest(r); err != nil {
				refuseSignature(w, err)
				return
			}
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, contract.MaxHealthReportBytes+1))
		if err != nil {
			reports.WithLabelValues("bad-request").Inc()
			http.Error(w, "reading the body failed", http.StatusBadRequest)
			return
		}
		if len(body) > contract.MaxHealthReportBytes {
			reports.WithLabelValues("too-large").Inc()
			http.Error(w, "health report too large", http.StatusRequestEntityTooLarge)
			return
		}
		rep, err := contract.ParseHealthReport(body)
		if err != nil {
			reports.WithLabelValues("bad-request").Inc()
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if !evaluates(id) {
			reports.WithLabelValues("not-evaluating").Inc()
			http.Error(w, "this replica does not evaluate runtime health", http.StatusMisdirectedRequest)
			return
		}
		ok, resync := t.Observe(id, rep)
		if !ok {
			reports.WithLabelValues("full").Inc()
			http.Error(w, "too many runtimes", http.StatusServiceUnavailable)
			return
		}
		reports.WithLabelValues("accepted").Inc()
		if !resync {
			w.WriteHeader(http.StatusNoContent)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(contract.HealthAnswer{Resync: true})
	})
}

// refuseSignature answers a report whose identity signature did not
// verify: 401 without one, else 403, the reason as deny reason header and
// report result.
func refuseSignature(w http.ResponseWriter, err error) {
	reason, status := contract.ReasonSignatureInvalid, http.StatusForbidden
	var ref *assertion.Refusal
	if errors.As(err, &ref) {
		reason = ref.Reason
	}
	if reason == contract.ReasonSignatureMissing {
		status = http.StatusUnauthorized
	}
	reports.WithLabelValues(string(reason)).Inc()
	w.Header().Set(contract.HeaderDenyReason, string(reason))
	http.Error(w, err.Error(), status)
}

// Server serves the health reports on every replica (a manager.Runnable
// that needs no leadership: the handler answers 503 where no evaluator runs).
type Server struct {
	Addr    string
	Handler http.Handler
}

// NeedLeaderElection: every replica serves.
func (s *Server) NeedLeaderElection() bool { return false }

// Start serves until ctx ends.
func (s *Server) Start(ctx context.Context) error {
	srv := &http.Server{Addr: s.Addr, Handler: s.Handler, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second,
		WriteTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
