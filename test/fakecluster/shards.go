package fakecluster

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/client-go/util/workqueue"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/test/fakeleases"
)

// Members are shard members of one group over a fake Lease client (no
// API server): each runs its rounds only when the test calls Tick or
// Settle, so every interleaving is the test's. Their clock stands still
// (a fake one), so no member's renew deadline passes between rounds
// however slowly the test runs.
type Members map[string]*shards.Shards

// ShardMembers makes the members ids of group, their Leases in namespace.
func ShardMembers(t testing.TB, namespace, group string, ids ...string) Members {
	t.Helper()
	cs := fakeleases.New()
	still := clocktesting.NewFakeClock(time.Unix(1_800_000_000, 0))
	m := Members{}
	for _, id := range ids {
		s, err := shards.New(shards.Options{Leases: cs.CoordinationV1(), Namespace: namespace, Group: group, Identity: id, Clock: still, Log: logr.Discard()})
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
