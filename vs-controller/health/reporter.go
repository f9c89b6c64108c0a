package health

import (
	"context"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

// Event reasons on a runtime's Kyma.
const (
	ReasonWatchPathBroken    = "WatchPathBroken"
	ReasonWatchPathRecovered = "WatchPathRecovered"
)

// KCPReporter makes a flag visible without Prometheus: an Event on the
// runtime's Kyma at each change and each Watcher's status.silentRuntimes,
// written only when its count changes.
type KCPReporter struct {
	// Client reads Watchers (the manager's cache) and patches their status.
	Client   client.Client
	Recorder events.EventRecorder
	Log      logr.Logger

	written map[types.NamespacedName]int32
}

// Changed records an Event on the runtime's Kyma. Its action is the cause:
// the events API merges Events of one object, reason and action into one
// series that keeps the first note, so a second cause within minutes
// would otherwise show the first one's text.
func (r *KCPReporter) Changed(_ context.Context, rt Runtime, from, to Finding) {
	if to.Healthy() {
		r.Log.Info("watch path recovered", "runtime", rt.ID, "was", from.Message())
		r.Recorder.Eventf(rt.Kyma, nil, corev1.EventTypeNormal, ReasonWatchPathRecovered, string(from.Cause), "%s", skrclient.Bounded("recovered from "+from.Message()))
		return
	}
	r.Log.Info("watch path broken", "runtime", rt.ID, "cause", to.Cause, "manager", to.Manager, "detail", skrclient.Bounded(to.Detail))
	r.Recorder.Eventf(rt.Kyma, nil, corev1.EventTypeWarning, ReasonWatchPathBroken, string(to.Cause), "%s", skrclient.Bounded(to.Message()))
}

// Round writes each Watcher's count of flagged runtimes when it changed: a
// runtime flagged for one manager counts for that manager's Watchers only.
func (r *KCPReporter) Round(ctx context.Context, flagged map[string]Finding) {
	var ws v1beta2.WatcherList
	if err := r.Client.List(ctx, &ws); err != nil {
		r.Log.Error(err, "listing Watchers for their silent-runtime counts")
		return
	}
	if r.written == nil {
		r.written = map[types.NamespacedName]int32{}
	}
	all := int32(0)
	perManager := map[string]int32{}
	for _, f := range flagged {
		if f.Manager == "" {
			all++
		} else {
			perManager[f.Manager]++
		}
	}
	seen := map[types.NamespacedName]bool{}
	for i := range ws.Items {
		w := &ws.Items[i]
		key := client.ObjectKeyFromObject(w)
		seen[key] = true
		n := all + perManager[w.ManagerName()]
		prev, ok := r.written[key]
		if !ok {
			prev = w.Status.SilentRuntimes
		}
		if n == prev {
			continue
		}
		orig := w.DeepCopy()
		w.Status.SilentRuntimes = n
		if err := r.Client.Status().Patch(ctx, w, client.MergeFrom(orig)); err != nil {
			r.Log.Error(err, "writing the silent-runtime count", "watcher", key)
			continue
		}
		watcherStatusWrites.Inc()
		r.written[key] = n
	}
	for k := range r.written {
		if !seen[k] {
			delete(r.written, k)
		}
	}
}
