package listener

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/identity"
)

// MetricEventsUnrouted counts events EnqueueKyma could not map to a Kyma,
// by reason: "unknown-runtime" (no Kyma has the runtime ID) or
// "lookup-error" (the lookup failed, e.g. the runtime-id index is missing or
// several Kymas carry the label). Registered with controller-runtime's
// metrics.Registry the first time EnqueueKyma is called.
const MetricEventsUnrouted = "runtime_watcher_listener_events_unrouted_total"

// lookupTimeout bounds one Kyma lookup in EnqueueKyma (a cache read).
const lookupTimeout = 5 * time.Second

var (
	unroutedOnce sync.Once
	unrouted     = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: MetricEventsUnrouted, Help: "Listener events EnqueueKyma could not map to a Kyma CR, by reason.",
	}, []string{"reason"})
)

func registerUnrouted() {
	unroutedOnce.Do(func() {
		unrouted.WithLabelValues("unknown-runtime")
		unrouted.WithLabelValues("lookup-error")
		_ = ctrlmetrics.Registry.Register(unrouted) // a second registry user would only re-add the same collector
	})
}

// EnqueueKyma is an event handler for source.Channel that enqueues the Kyma
// CR of each event's runtime in namespace, found the one way every
// component finds it (docs/architecture.md §4.5, identity.NewKymaLookup): the
// Kyma labelled kyma-project.io/runtime-id=<id>, else the Kyma named <id>.
// Changes and resyncs alike enqueue the Kyma; objects that are not listener
// events are ignored.
//
// r is normally the manager's cache (mgr.GetCache()) with the runtime-id
// index registered before the manager starts:
//
//	_ = identity.IndexRuntimeID(ctx, mgr.GetFieldIndexer())
//	src := source.Channel(l.Events(), listener.EnqueueKyma(mgr.GetCache(), "kcp-system"))
//
// An event whose runtime has no Kyma, or whose lookup fails, enqueues
// nothing: it is logged and counted in
// runtime_watcher_listener_events_unrouted_total{reason}.
func EnqueueKyma(r client.Reader, namespace string) handler.EventHandler {
	registerUnrouted()
	lookup := identity.NewKymaLookup(r, namespace)
	log := ctrllog.Log.WithName("listener").WithName("enqueue-kyma")
	return handler.Funcs{
		GenericFunc: func(ctx context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			ev, ok := EventFrom(e.Object)
			if !ok {
				return
			}
			key, found, err := KymaOf(ctx, lookup, namespace, ev.RuntimeID)
			switch {
			case err != nil:
				unrouted.WithLabelValues("lookup-error").Inc()
				log.Error(err, "cannot find the Kyma of an event's runtime; event not enqueued", "runtimeID", ev.RuntimeID, "resync", ev.Resync)
			case !found:
				unrouted.WithLabelValues("unknown-runtime").Inc()
				log.Info("no Kyma for an event's runtime; event not enqueued", "runtimeID", ev.RuntimeID, "resync", ev.Resync)
			default:
				q.Add(reconcile.Request{NamespacedName: key})
			}
		},
	}
}

// KymaOf returns the namespaced name of the runtime's Kyma CR through
// lookup (normally identity.NewKymaLookup(reader, namespace)), bounded by a
// short timeout. Use it in your own (typed) handlers.
func KymaOf(ctx context.Context, lookup identity.RuntimeLookup, namespace, runtimeID string) (types.NamespacedName, bool, error) {
	ctx, cancel := context.WithTimeout(ctx, lookupTimeout)
	defer cancel()
	rt, found, err := lookup.LookupRuntime(ctx, runtimeID)
	if err != nil || !found {
		return types.NamespacedName{}, found, err
	}
	return types.NamespacedName{Namespace: namespace, Name: rt.KymaName}, true, nil
}

// EnqueueKymaByName is the earlier EnqueueKyma: it enqueues the Kyma CR
// named by the event's runtime ID in namespace, as Lifecycle Manager does
// with Kyma's listener. It misses runtimes identified by the
// kyma-project.io/runtime-id label.
//
// Deprecated: use EnqueueKyma(reader, namespace), which finds the Kyma the
// way ext-authz does.
func EnqueueKymaByName(namespace string) handler.EventHandler {
	return handler.Funcs{
		GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
			if ev, ok := EventFrom(e.Object); ok {
				q.Add(reconcile.Request{NamespacedName: types.NamespacedName{Namespace: namespace, Name: ev.RuntimeID}})
			}
		},
	}
}
