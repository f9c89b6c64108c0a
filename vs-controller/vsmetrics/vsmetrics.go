// Package vsmetrics holds vs-controller's own Prometheus metrics, all named
// runtime_watcher_vs_controller_…, registered with controller-runtime's
// registry (served on --metrics-bind-address next to controller-runtime's
// own metrics). The reconcilers count into them; tests read them back with
// prometheus/testutil.
package vsmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

const (
	// Namespace and Subsystem prefix every metric of vs-controller.
	Namespace = "runtime_watcher"
	Subsystem = "vs_controller"
)

var (
	// VirtualServiceReconciles counts Watcher reconciles by result:
	// applied, unchanged, deleted, apply-failed.
	VirtualServiceReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "virtualservice_reconciles_total",
		Help: "Watcher reconciles by outcome: applied, unchanged, deleted, apply-failed.",
	}, []string{"result"})
	// WatcherWrites counts the Watcher reconciler's write requests by kind.
	WatcherWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "watcher_writes_total",
		Help: "Write requests the Watcher reconciler issued, by kind of write.",
	}, []string{"kind"})
	// RuntimeReconciles counts runtime reconciles that reached the SKR, by
	// result: applied, unchanged, unreachable, failed, invalid-kubeconfig,
	// removed; not-owner counts passes refused because another replica owns
	// the runtime (shards).
	RuntimeReconciles = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_reconciles_total",
		Help: "Runtime reconciles that reached the SKR, by outcome: applied, unchanged, unreachable, failed, invalid-kubeconfig, removed; and not-owner: passes not begun because another replica owns the runtime (shards).",
	}, []string{"result"})
	// RuntimeWrites counts the runtime reconciler's write requests (KCP and
	// SKR) by kind.
	RuntimeWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_writes_total",
		Help: "Write requests the runtime reconciler issued (KCP and SKR), by kind of write.",
	}, []string{"kind"})
	// CertificatesRetired counts retirements of runtime certificates
	// written (contract.AnnotationRetiredCertificates), by cause: renewal
	// (the previous certificate retired after the overlap) or revoked (the
	// platform revoked the current one; retired at once).
	CertificatesRetired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "certificates_retired_total",
		Help: "Retirements of runtime certificates written on Kymas, by cause: renewal (the previous certificate after the overlap), revoked (the revoked certificate, at once).",
	}, []string{"cause"})
	// KubeconfigUncachedReads counts kubeconfig Secrets read from the API
	// server because they lack the cache label (app.kubernetes.io/part-of=
	// runtime-watcher): one per pass of such a runtime.
	KubeconfigUncachedReads = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "kubeconfig_uncached_reads_total",
		Help: "Kubeconfig Secrets read from the API server, not the cache, because they lack the label app.kubernetes.io/part-of=runtime-watcher.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(VirtualServiceReconciles, WatcherWrites, RuntimeReconciles, RuntimeWrites, KubeconfigUncachedReads, CertificatesRetired)
}

// Certificate and CA metrics (docs/architecture.md §4.9).
var (
	// CANotAfter is each CA's not-after (Unix seconds), by anchor and CA
	// serial.
	CANotAfter = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "ca_not_after_seconds",
		Help: "Not-after (Unix seconds) of every CA in a trust bundle, by anchor (runtime, gateway) and CA serial.",
	}, []string{"anchor", "ca"})
	// CASecretValid is 1 when the anchor's CA Secret is usable, 0 when its
	// content was rejected (the bundle is kept as it was).
	CASecretValid = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "ca_secret_valid",
		Help: "1 when the anchor's CA Secret holds a usable CA, 0 when it was rejected (the trust bundle is kept).",
	}, []string{"anchor"})
	// ClientCAExtraCAs is the number of CAs from the migration CA Secret
	// (--migration-extra-ca-secret, Lifecycle Manager's CA) in the
	// gateway's client CA Secret as last written; 0 when the window is
	// closed or that Secret is unusable.
	ClientCAExtraCAs = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "gateway_client_ca_extra_cas",
		Help: "CAs of the migration CA Secret (--migration-extra-ca-secret) in the gateway's client CA bundle as last written; 0: trust window closed or that Secret unusable.",
	})
	// TrustStoreRefused counts the certificates found in a trust store
	// ConfigMap and not admitted (docs/certificates.md, "The trust
	// store"): not sealed by vs-controller, or not a CA.
	TrustStoreRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "trust_store_refused_total",
		Help: "Certificates in a trust store ConfigMap not admitted to the trust bundle: without vs-controller's seal, or not a CA.",
	}, []string{"anchor"})
	// TrustRuntimesStateUnknown counts the runtimes whose SKR state is
	// unknown and that keep every CA of the runtime bundle (for at most
	// trust.DefaultUnknownHold each).
	TrustRuntimesStateUnknown = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "trust_runtimes_state_unknown",
		Help: "Runtimes whose SKR state is unknown (after a restart, unreachable) and that keep every CA of the runtime trust bundle, each for a bounded time.",
	})
	// RuntimeCertNotAfter is each runtime certificate's not-after (Unix
	// seconds), with the serial of the CA that signed it.
	RuntimeCertNotAfter = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_certificate_not_after_seconds",
		Help: "Not-after (Unix seconds) of every runtime certificate, by runtime and signing CA serial (\"unknown\" when no CA held signed it).",
	}, []string{"runtime", "ca"})
	// RuntimesOnOldCA counts runtimes whose certificate is not signed by the
	// current CA.
	RuntimesOnOldCA = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtimes_on_old_ca",
		Help: "Runtimes whose certificate is not signed by the current runtime CA.",
	})
	// RuntimesExpiringSoon counts runtimes whose certificate expires within
	// 7 days.
	RuntimesExpiringSoon = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtimes_certificate_expiring_soon",
		Help: "Runtimes whose certificate expires within 7 days.",
	})
	// RenewalsRequested counts renewal requests for runtime certificates
	// after a CA rotation.
	RenewalsRequested = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "certificate_renewals_requested_total",
		Help: "Runtime certificate renewals requested (Issuing condition) because a newer CA exists.",
	})
)

func init() {
	ctrlmetrics.Registry.MustRegister(CANotAfter, CASecretValid, RuntimeCertNotAfter, RuntimesOnOldCA, RuntimesExpiringSoon, RenewalsRequested, ClientCAExtraCAs, TrustStoreRefused, TrustRuntimesStateUnknown)
}
