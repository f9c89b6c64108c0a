package bundle

import (
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
)

// Delivery objects of the bundle (docs/architecture.md §4.8): the
// PodDisruptionBudget of the two webhook replicas and the managers file.
const (
	// ManagersConfigMapName is the ConfigMap holding the managers file.
	ManagersConfigMapName = skr.ManagersConfigMapName
	// ManagersKey is its key: one manager name per line, sorted, each
	// followed by " heartbeats" (contract.ManagerHeartbeats) when the
	// manager opted in to heartbeats, and a newline. The Deployment mounts
	// it at /etc/skr-webhook/managers/managers (--managers-file).
	ManagersKey = "managers"
)

// PodDisruptionBudget is manifests/skr/pdb.yaml in the bundle's namespace.
func PodDisruptionBudget(o Options) (*policyv1.PodDisruptionBudget, error) {
	pdb := &policyv1.PodDisruptionBudget{}
	if err := decode(skr.PodDisruptionBudget, pdb); err != nil {
		return nil, err
	}
	pdb.Namespace = o.namespace()
	return pdb, nil
}

// Managers are the distinct manager names of the Watchers that get a
// webhook (Webhooked), sorted.
func Managers(watchers []v1beta2.Watcher) []string {
	seen := map[string]bool{}
	out := []string{}
	for _, w := range Webhooked(watchers) {
		if seen[w.ManagerName()] {
			continue
		}
		seen[w.ManagerName()] = true
		out = append(out, w.ManagerName())
	}
	sort.Strings(out)
	return out
}

// HeartbeatManagers are the managers that opted in to heartbeats
// (spec.heartbeats): a manager is in when any of its Webhooked Watchers
// sets it.
func HeartbeatManagers(watchers []v1beta2.Watcher) map[string]bool {
	out := map[string]bool{}
	// Only a Watcher that gets webhooks (Webhooked: it owns its manager's
	// route) decides: a Watcher that lost a route conflict cannot turn
	// heartbeats on for the owner's operator.
	for _, w := range Webhooked(watchers) {
		if w.Spec.Heartbeats {
			out[w.ManagerName()] = true
		}
	}
	return out
}

// ManagersConfigMap is the ConfigMap skr-webhook-managers: the webhook's
// --managers-file, one manager per line (ManagersKey), built from all
// Watchers like the webhook configuration. The webhook re-reads it, so a
// Watcher change restarts nothing.
func ManagersConfigMap(o Options, watchers []v1beta2.Watcher) *corev1.ConfigMap {
	var b strings.Builder
	heartbeats := HeartbeatManagers(watchers)
	for _, m := range Managers(watchers) {
		b.WriteString(m)
		if heartbeats[m] {
			b.WriteString(" " + contract.ManagerHeartbeats)
		}
		b.WriteByte('\n')
	}
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: ManagersConfigMapName, Namespace: o.namespace(),
			Labels: map[string]string{"app.kubernetes.io/name": Name, contract.LabelPartOf: contract.PartOf},
		},
		Data: map[string]string{ManagersKey: b.String()},
	}
}
