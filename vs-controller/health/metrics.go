package health

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// Metrics of the watch-path health, on vs-controller's /metrics. Every label
// set is bounded: causes, report results, probe kinds.
var (
	flaggedRuntimes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "runtime_watcher_vs_controller_watch_path_flagged_runtimes",
		Help: "Runtimes whose watch path is broken now, by cause (docs/operations.md \"My operator stopped hearing from a runtime\").",
	}, []string{"cause"})
	transitions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_watch_path_transitions_total",
		Help: "Changes of a runtime's watch-path flag, by the cause it changed to (recovered: cleared).",
	}, []string{"cause"})
	reports = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_health_reports_total",
		Help: "Health reports from SKR webhooks by result: accepted, not-evaluating (421, another replica evaluates), bad-request, too-large, no-identity, identity-signature-* (the identity signature of ext-authz did not verify: missing, malformed, expired, unknown-key, invalid), full, not-found, method-not-allowed.",
	}, []string{"result"})
	probes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_health_probes_total",
		Help: "Probes of runtimes by kind (config: the SKR webhook configuration check; diagnose: why a silent runtime is not heard) and outcome (ok, found: a cause, error).",
	}, []string{"probe", "outcome"})
	runtimesGauge = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "runtime_watcher_vs_controller_health_runtimes",
		Help: "Runtimes in the last health round: evaluated, and heard (a report since this replica started evaluating).",
	}, []string{"state"})
	roundSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "runtime_watcher_vs_controller_health_round_seconds",
		Help:    "Duration of one health round over every runtime, probes included.",
		Buckets: []float64{.001, .005, .01, .05, .1, .5, 1, 2.5, 5, 10, 30},
	})
	changesTold = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_health_changes_total",
		Help: "Changes of a runtime's watch-path flag by outcome: told (an Event on its Kyma, the Watchers' counts, a resync on recovery) or damped (held back: the same change of cause was told within --health-event-window).",
	}, []string{"outcome"})
	managersIgnored = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_health_report_managers_ignored_total",
		Help: "Managers named in health reports that the reporting runtime's SKR carries no webhook of (a report speaks only for its own runtime's managers): not heeded, counted once per report.",
	})
	watcherStatusWrites = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "runtime_watcher_vs_controller_health_watcher_status_writes_total",
		Help: "Patches of a Watcher's status.silentRuntimes (only when its count changes).",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(flaggedRuntimes, transitions, reports, probes, runtimesGauge, roundSeconds, watcherStatusWrites,
		changesTold, managersIgnored)
	changesTold.WithLabelValues("told")
	changesTold.WithLabelValues("damped")
	for _, c := range Causes {
		flaggedRuntimes.WithLabelValues(string(c))
		transitions.WithLabelValues(string(c))
	}
	transitions.WithLabelValues("recovered")
	for _, r := range []string{"accepted", "not-evaluating", "bad-request", "too-large", "no-identity", "full", "not-found", "method-not-allowed"} {
		reports.WithLabelValues(r)
	}
	for _, r := range assertion.Reasons {
		reports.WithLabelValues(string(r))
	}
	for _, p := range []string{"config", "diagnose"} {
		for _, o := range []string{"ok", "found", "error"} {
			probes.WithLabelValues(p, o)
		}
	}
}
