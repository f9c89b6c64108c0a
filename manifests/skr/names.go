package skr

import "strings"

// Names of the watcher bundle's objects in a runtime: what vs-controller
// renders (its Deployment, Service, ValidatingWebhookConfiguration,
// PodDisruptionBudget and NetworkPolicy are all named WebhookName), what it
// runs during a take-over from Lifecycle Manager, and Lifecycle Manager's
// own objects it adopts or removes. The one list: vs-controller/bundle
// names its objects from it, and module-sync refuses every name in it
// (IsBundleName) whatever a module's grant says. vs-controller/bundle's
// TestBundleNamesAreOneList enumerates the rendered bundle against it.
const (
	// WebhookName: the Deployment, Service, ValidatingWebhookConfiguration,
	// PodDisruptionBudget and NetworkPolicy.
	WebhookName = "skr-webhook"
	// SecretName holds the webhook's ca.crt, tls.crt and tls.key (the
	// runtime's KCP client key).
	SecretName = "skr-webhook-tls"
	// ManagersConfigMapName is the managers file (heartbeat opt-in).
	ManagersConfigMapName = "skr-webhook-managers"
	// TakeoverName and TakeoverSecretName: the Deployment and Secret of a
	// take-over from Lifecycle Manager.
	TakeoverName       = "skr-webhook-takeover"
	TakeoverSecretName = "skr-webhook-takeover-tls"
	// LMMetricsServiceName and LMPriorityClassName: Lifecycle Manager's
	// objects without a counterpart in our bundle.
	LMMetricsServiceName = "skr-webhook-metrics"
	LMPriorityClassName  = "skr-webhook-priority"
	// ReservedPrefix starts the names of Lifecycle Manager's
	// NetworkPolicies and of module-sync's own objects in a runtime
	// (kube-system/kyma-project.io--module-workloads).
	ReservedPrefix = "kyma-project.io--"
)

// LMNetworkPolicyNames are Lifecycle Manager's NetworkPolicies in the SKR.
var LMNetworkPolicyNames = []string{
	ReservedPrefix + "seed-to-watcher",
	ReservedPrefix + "watcher-to-apiserver",
	ReservedPrefix + "metrics-to-watcher",
	ReservedPrefix + "watcher-to-dns",
}

// ObjectNames are the names of every object of the bundle (ours and
// Lifecycle Manager's).
func ObjectNames() []string {
	return append([]string{WebhookName, SecretName, ManagersConfigMapName, TakeoverName, TakeoverSecretName,
		LMMetricsServiceName, LMPriorityClassName}, LMNetworkPolicyNames...)
}

// IsBundleName says whether name is one of ObjectNames or starts with
// ReservedPrefix.
func IsBundleName(name string) bool {
	if strings.HasPrefix(name, ReservedPrefix) {
		return true
	}
	for _, n := range ObjectNames() {
		if n == name {
			return true
		}
	}
	return false
}
