package shards

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// The shard metrics (runtime_watcher_shard_…), each labelled with the
// member's group (vs-controller, module-sync), registered with
// controller-runtime's registry.
var (
	renewals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "lease_renewals_total",
		Help: "Renewals of this member's Lease by result: renewed, failed.",
	}, []string{"group", "result"})
	viewChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "view_changes_total",
		Help: "Membership views this member adopted (each moves the runtimes whose owner changed).",
	}, []string{"group"})
	fencings = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "fenced_total",
		Help: "Times this member stopped all work because its own clock said the renew deadline passed without a renewal (renewals failing, or the member did not run: SIGSTOP, a frozen VM).",
	}, []string{"group"})
	refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "passes_refused_total",
		Help: "Passes not begun here because another member owns the runtime (or has not released it yet).",
	}, []string{"group"})
	ignored = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "leases_ignored_total",
		Help: "Member Leases (or parts of them) not believed, by reason: name (its name is not <group>-shard-<holder>), duration (it declared a longer duration than ours; counted as ours).",
	}, []string{"group", "reason"})
	unsent = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "requests_fenced_total",
		Help: "Requests of a pass not sent because this member's own clock said its renew deadline passed (FenceTransport).",
	}, []string{"group"})
	memberCount = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "members",
		Help: "Live members in this member's view (itself included).",
	}, []string{"group"})
	// Owned is set by the components: the runtimes this member owns.
	owned = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "runtime_watcher", Subsystem: "shard", Name: "owned_runtimes",
		Help: "Runtimes this member owns (its identity in the label member).",
	}, []string{"group", "member"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(renewals, viewChanges, fencings, refusals, ignored, unsent, memberCount, owned)
}

// Metrics records one member's decisions.
type Metrics struct{ group, member string }

// NewMetrics returns the metrics of group's member.
func NewMetrics(group, member string) *Metrics { return &Metrics{group: group, member: member} }

func (m *Metrics) renewal(result string) {
	if m != nil {
		renewals.WithLabelValues(m.group, result).Inc()
	}
}

func (m *Metrics) members(n, changes int) {
	if m != nil {
		memberCount.WithLabelValues(m.group).Set(float64(n))
		viewChanges.WithLabelValues(m.group).Add(float64(changes))
	}
}

func (m *Metrics) fenced() {
	if m != nil {
		fencings.WithLabelValues(m.group).Inc()
	}
}

func (m *Metrics) ignored(reason string) {
	if m != nil {
		ignored.WithLabelValues(m.group, reason).Inc()
	}
}

func (m *Metrics) unsent() {
	if m != nil {
		unsent.WithLabelValues(m.group).Inc()
	}
}

func (m *Metrics) refused() {
	if m != nil {
		refusals.WithLabelValues(m.group).Inc()
	}
}

// SetOwned records how many runtimes this member owns.
func (m *Metrics) SetOwned(n int) {
	if m != nil {
		owned.WithLabelValues(m.group, m.member).Set(float64(n))
	}
}
