package vsmetrics

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Adoption metrics: the take-over of runtimes Lifecycle Manager set up
// (docs/migrating-from-lifecycle-manager.md).
var (
	// Adoptions counts runtime reconciles that found Lifecycle Manager's
	// objects (or our take-over objects) in the SKR, by step:
	// lm-active (waits for skip-reconciliation), waiting-for-webhook,
	// switched (admission now ours, LM's objects removed), completed
	// (take-over objects removed), failed.
	Adoptions = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "lm_adoption_steps_total",
		Help: "Runtime reconciles in a take-over from Lifecycle Manager, by step: lm-active, waiting-for-webhook, switched, completed, failed.",
	}, []string{"step"})
	// RuntimesOnLMCertificate is the number of runtimes whose SKR still
	// holds Lifecycle Manager's Secret skr-webhook-tls, i.e. whose webhook
	// still posts with an LM-issued client certificate (as last seen by
	// the runtime reconciler). The gateway must trust LM's CA while it is
	// above zero.
	RuntimesOnLMCertificate = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtimes_on_lm_certificate",
		Help: "Runtimes whose SKR still holds Lifecycle Manager's skr-webhook-tls Secret (an LM-issued client certificate), as last seen.",
	})
	// RuntimeOnLMCertificate names them: 1 for each runtime counted by
	// RuntimesOnLMCertificate, labelled with its runtime ID and Kyma name;
	// the series is deleted when the runtime is taken over (or its Kyma
	// goes), so only runtimes still on LM's certificate have one.
	RuntimeOnLMCertificate = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: Namespace, Subsystem: Subsystem,
		Name: "runtime_on_lm_certificate",
		Help: "1 for each runtime whose SKR still holds Lifecycle Manager's skr-webhook-tls Secret (an LM-issued client certificate), as last seen; no series once taken over.",
	}, []string{"runtime", "kyma"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(Adoptions, RuntimesOnLMCertificate, RuntimeOnLMCertificate)
}
