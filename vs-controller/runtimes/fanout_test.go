package runtimes

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

// TestWatcherBurstIsOneFanOut: a burst of Watcher events lists the Kymas
// once and enqueues each once (the vs-controller bench's hot loop was one
// list and one AddAfter per Kyma for every Watcher event).
func TestWatcherBurstIsOneFanOut(t *testing.T) {
	var objs []client.Object
	for i := range 50 {
		objs = append(objs, fakecluster.Kyma("kcp-system", fmt.Sprintf("kyma-%02d", i), "", ""))
	}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, metav1.SchemeGroupVersion)
	fakecluster.AddKyma(scheme)
	c := fakecluster.New(t, scheme, fakecluster.WithObjects(objs...))
	h := &allKymas{r: &Reconciler{Client: c, KymaNamespace: "kcp-system", WatcherDebounce: 50 * time.Millisecond}}
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	ctx := context.Background()
	for range 1000 {
		h.Create(ctx, event.CreateEvent{}, q)
	}
	deadline := time.Now().Add(10 * time.Second)
	for q.Len() < 50 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond) // polling the queue length, not waiting for a race
	}
	if q.Len() != 50 || c.Lists("Kyma") != 1 {
		t.Fatalf("after 1,000 Watcher events: %d queued, %d Kyma lists; want 50 and 1", q.Len(), c.Lists("Kyma"))
	}
	// A later event schedules the next fan-out.
	h.Update(ctx, event.UpdateEvent{}, q)
	for c.Lists("Kyma") < 2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if c.Lists("Kyma") != 2 {
		t.Fatalf("a Watcher event after the fan-out did not list again (%d lists)", c.Lists("Kyma"))
	}
}
