package fakecluster

import (
	"context"
	"strconv"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/shards"
)

// Members are shard members of one group over a fake Lease client (no
// API server): each runs its rounds only when the test calls Tick or
// Settle, so every interleaving is the test's.
type Members map[string]*shards.Shards

// ShardMembers makes the members ids of group, their Leases in namespace.
func ShardMembers(t testing.TB, namespace, group string, ids ...string) Members {
	t.Helper()
	cs := fake.NewClientset()
	// The fake tracker keeps no resourceVersion, and a member updates only
	// a Lease it read with one: number the writes as an API server does.
	var mu sync.Mutex
	rv := 0
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if o, ok := a.(interface{ GetObject() runtime.Object }); ok {
			mu.Lock()
			rv++
			o.GetObject().(metav1.Object).SetResourceVersion(strconv.Itoa(rv))
			mu.Unlock()
		}
		return false, nil, nil
	})
	m := Members{}
	for _, id := range ids {
		s, err := shards.New(shards.Options{Leases: cs.CoordinationV1(), Namespace: namespace, Group: group, Identity: id, Log: logr.Discard()})
		if err != nil {
			t.Fatal(err)
		}
		m[id] = s
	}
	return m
}

// Settle runs rounds of the members ids, in the order given, three times
// over: enough for members that joined together to adopt, publish and
// confirm the view of them all.
func (m Members) Settle(ctx context.Context, ids ...string) {
	for range 3 {
		for _, id := range ids {
			m[id].Tick(ctx, logr.Discard())
		}
	}
}

// Join has first work alone, then joined by the others: first adopts,
// publishes and confirms the view of them all (its OnChange callbacks run
// at each change).
func (m Members) Join(ctx context.Context, first string, others ...string) {
	m.Settle(ctx, first)
	m.Settle(ctx, append([]string{first}, others...)...)
}

// StartSource starts src, a raw source of a controller, on a queue of its
// own, as the controller's start does; the queue shuts down with the test.
func StartSource(t testing.TB, src source.Source) workqueue.TypedRateLimitingInterface[reconcile.Request] {
	t.Helper()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	t.Cleanup(q.ShutDown)
	if err := src.Start(context.Background(), q); err != nil {
		t.Fatal(err)
	}
	return q
}
