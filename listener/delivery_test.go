package listener_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
)

const (
	resyncBody    = `{"watched":{},"watchedGvk":{},"resync":"startup"}`
	heartbeatBody = `{"watched":{},"watchedGvk":{},"heartbeat":true}`
)

// fakeClock is a settable clock for the last-seen record.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)} }

func TestResyncEvents(t *testing.T) {
	s := start(t)
	id := hdr(contract.HeaderRuntimeID, "runtime-a")
	for _, tc := range []struct {
		body   string
		want   int
		reason string
		label  string
	}{
		{resyncBody, http.StatusOK, "startup", "startup"},
		{`{"watched":{},"watchedGvk":{},"resync":"overflow"}`, http.StatusOK, "overflow", "overflow"},
		{`{"watched":{},"watchedGvk":{},"resync":"expired"}`, http.StatusOK, "expired", "expired"},
		{`{"resync":"expired"}`, http.StatusOK, "expired", "expired"},
		{`{"watched":{},"watchedGvk":{},"resync":"from-a-newer-sender"}`, http.StatusOK, "from-a-newer-sender", "other"},
		// a resync with a heartbeat flag is a resync: it must reach the operator
		{`{"watched":{},"watchedGvk":{},"resync":"startup","heartbeat":true}`, http.StatusOK, "startup", "startup"},
		{`{"watched":{},"watchedGvk":{},"resync":"Startup"}`, http.StatusBadRequest, "", ""},
		{`{"watched":{},"watchedGvk":{},"resync":"-x"}`, http.StatusBadRequest, "", ""},
		{`{"watched":{},"watchedGvk":{},"resync":"` + string(bytes.Repeat([]byte("a"), 64)) + `"}`, http.StatusBadRequest, "", ""},
		{`{"watched":{},"watchedGvk":{},"resync":1}`, http.StatusBadRequest, "", ""},
		{`{"watched":{},"watchedGvk":{}}`, http.StatusBadRequest, "", ""}, // neither an object nor a resync
	} {
		resp, text := s.do(t, http.MethodPost, s.l.Path(), body(tc.body), id)
		if resp.StatusCode != tc.want {
			t.Fatalf("%s: %d (%s), want %d", tc.body, resp.StatusCode, text, tc.want)
		}
		if tc.want != http.StatusOK {
			noEvent(t, s.l.Events())
			continue
		}
		obj := nextEvent(t, s.l.Events()).Object
		reason, ok := listener.IsResync(obj)
		if !ok || reason != tc.reason {
			t.Fatalf("%s: IsResync = %q, %v", tc.body, reason, ok)
		}
		ev, _ := listener.EventFrom(obj)
		if ev.RuntimeID != "runtime-a" || ev.Resync != tc.reason || ev.Watched != (types.NamespacedName{}) || ev.WatchedGVK != (schema.GroupVersionKind{}) {
			t.Fatalf("%s: event %+v", tc.body, ev)
		}
		// Kyma listener v2's keys are there, so old consumers enqueue the runtime.
		if u := obj.(*unstructured.Unstructured); u.Object[listener.KeyRuntimeID] != "runtime-a" || u.Object[listener.KeyWatched] == nil || u.Object[listener.KeyWatchedGVK] == nil {
			t.Fatalf("%s: object %v", tc.body, u.Object)
		}
	}
	want := map[string]float64{"startup": 2, "overflow": 1, "expired": 2, "other": 1}
	for reason, n := range want {
		if got := metricValue(t, s.reg, listener.MetricResyncs, map[string]string{"reason": reason}); got != n {
			t.Errorf("%s{reason=%s} = %v, want %v", listener.MetricResyncs, reason, got, n)
		}
	}

	// A change is not a resync.
	if _, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); text != "" {
		t.Fatalf("change: %q", text)
	}
	if r, ok := listener.IsResync(nextEvent(t, s.l.Events()).Object); ok || r != "" {
		t.Fatalf("change is a resync %q", r)
	}
	if _, ok := listener.IsResync(&unstructured.Unstructured{Object: map[string]any{listener.KeyResync: "startup"}}); ok {
		t.Fatal("an object without runtime-id is a resync")
	}
	if _, ok := listener.IsResync(identity.NewKyma()); ok {
		t.Fatal("a Kyma is a resync")
	}
}

func TestHeartbeatsAndLastSeen(t *testing.T) {
	clk := newClock()
	s := start(t, listener.WithClock(clk.now))
	if _, ok := s.l.LastSeen("runtime-a"); ok {
		t.Fatal("last seen before any event")
	}
	resp, text := s.do(t, http.MethodPost, s.l.Path(), body(heartbeatBody), hdr(contract.HeaderRuntimeID, "runtime-a"))
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("heartbeat: %d %s", resp.StatusCode, text)
	}
	noEvent(t, s.l.Events()) // never a controller event
	if got, ok := s.l.LastSeen("runtime-a"); !ok || !got.Equal(clk.now()) {
		t.Fatalf("LastSeen = %v, %v", got, ok)
	}
	if got := metricValue(t, s.reg, listener.MetricHeartbeats, nil); got != 1 {
		t.Fatalf("heartbeats = %v", got)
	}
	if got := metricValue(t, s.reg, listener.MetricEventsDelivered, nil); got != 0 {
		t.Fatalf("delivered = %v, a heartbeat is not an event", got)
	}
	want := float64(clk.now().Unix())
	if got := metricValue(t, s.reg, listener.MetricLastSeen, map[string]string{"runtime_id": "runtime-a"}); got != want {
		t.Fatalf("last seen metric %v, want %v", got, want)
	}

	// A change advances it too; a refused request does not.
	clk.add(time.Minute)
	if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderRuntimeID, "runtime-a")); resp.StatusCode != http.StatusOK {
		t.Fatal(resp.Status)
	}
	nextEvent(t, s.l.Events())
	changed := clk.now()
	clk.add(time.Minute)
	if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(`{"watched":{}}`), hdr(contract.HeaderRuntimeID, "runtime-a")); resp.StatusCode != http.StatusBadRequest {
		t.Fatal(resp.Status)
	}
	if got, _ := s.l.LastSeen("runtime-a"); !got.Equal(changed) {
		t.Fatalf("LastSeen = %v, want %v (the change, not the refused body)", got, changed)
	}
	if got := metricValue(t, s.reg, listener.MetricLastSeen, map[string]string{"runtime_id": "runtime-a"}); got != float64(changed.Unix()) {
		t.Fatalf("last seen metric %v, want %v", got, changed.Unix())
	}
}

func TestLastSeenBounds(t *testing.T) {
	clk := newClock()
	s := start(t, listener.WithClock(clk.now), listener.WithLastSeen(2, time.Hour))
	beat := func(id string) {
		t.Helper()
		if resp, text := s.do(t, http.MethodPost, s.l.Path(), body(heartbeatBody), hdr(contract.HeaderRuntimeID, id)); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", id, resp.StatusCode, text)
		}
		clk.add(time.Second)
	}
	beat("runtime-a")
	beat("runtime-b")
	beat("runtime-a") // a is now the newer one
	beat("runtime-c") // over the limit: b, heard from longest ago, goes
	if _, ok := s.l.LastSeen("runtime-b"); ok {
		t.Fatal("runtime-b kept over the limit")
	}
	for _, id := range []string{"runtime-a", "runtime-c"} {
		if _, ok := s.l.LastSeen(id); !ok {
			t.Fatalf("%s forgotten", id)
		}
	}
	if got := metricValue(t, s.reg, listener.MetricLastSeenEvicted, nil); got != 1 {
		t.Fatalf("evicted = %v", got)
	}
	if got := metricValue(t, s.reg, listener.MetricLastSeenRuntimes, nil); got != 2 {
		t.Fatalf("runtimes = %v", got)
	}

	// After the retention a runtime is forgotten, from the accessor and the metric.
	clk.add(time.Hour - time.Second)
	beat("runtime-c")
	clk.add(30 * time.Minute)
	if _, ok := s.l.LastSeen("runtime-a"); ok {
		t.Fatal("runtime-a kept past the retention")
	}
	if got := metricValue(t, s.reg, listener.MetricLastSeenRuntimes, nil); got != 1 {
		t.Fatalf("runtimes = %v, want 1", got)
	}
	if all := s.l.LastSeenAll(); len(all) != 1 || all["runtime-c"].IsZero() {
		t.Fatalf("LastSeenAll = %v", all)
	}
	if _, err := listener.New(":0", testManager, listener.WithLastSeen(0, time.Hour)); err == nil {
		t.Fatal("limit 0 accepted")
	}
}

// TestConsumerGate: with Consumer() the server answers 503 with Retry-After
// at once until a consumer runs (the leader), accepts while it runs, and is
// ready throughout.
func TestConsumerGate(t *testing.T) {
	s := start(t, listener.WithEnqueueTimeout(5*time.Second))
	legacy, err := listener.New(":0", "legacy", listener.WithRegisterer(nil))
	if err != nil {
		t.Fatal(err)
	}
	if !legacy.NeedLeaderElection() || !legacy.ConsumerRunning() {
		t.Fatal("without Consumer() the listener must stay the leader's, as before")
	}

	c := s.l.Consumer()
	if s.l.NeedLeaderElection() {
		t.Fatal("with a consumer marker the server must run on every replica")
	}
	if le, ok := c.(manager.LeaderElectionRunnable); !ok || !le.NeedLeaderElection() {
		t.Fatal("the consumer marker must need leader election by default")
	}
	waitFor(t, func() bool { return s.l.ReadyCheck(nil) == nil }) // ready without a consumer
	id := hdr(contract.HeaderRuntimeID, "runtime-a")
	for _, b := range []string{validBody, resyncBody, heartbeatBody} {
		start := time.Now()
		resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(b), id)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s without consumer: %d, Retry-After %q", b, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
		// "at once": not after the 5 s enqueue wait a full buffer would take
		if d := time.Since(start); d > 4*time.Second {
			t.Fatalf("503 after %v", d)
		}
	}
	noEvent(t, s.l.Events())
	if _, ok := s.l.LastSeen("runtime-a"); ok {
		t.Fatal("a replica without consumer recorded last-seen")
	}
	if got := metricValue(t, s.reg, listener.MetricNoConsumerRefused, nil); got != 3 {
		t.Fatalf("no-consumer refusals = %v", got)
	}

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	waitFor(t, s.l.ConsumerRunning)
	if got := metricValue(t, s.reg, listener.MetricConsumerRunning, nil); got != 1 {
		t.Fatalf("consumer_running = %v", got)
	}
	if resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); resp.StatusCode != http.StatusOK {
		t.Fatalf("with consumer: %d %s", resp.StatusCode, text)
	}
	nextEvent(t, s.l.Events())

	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.l.ConsumerRunning() {
		t.Fatal("consumer still running")
	}
	if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(validBody), id); resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("after the consumer stopped: %d", resp.StatusCode)
	}
	if got := metricValue(t, s.reg, listener.MetricConsumerRunning, nil); got != 0 {
		t.Fatalf("consumer_running = %v", got)
	}

	everywhere, err := listener.New(":0", "everywhere", listener.WithRegisterer(nil), listener.WithLeaderElection(false))
	if err != nil {
		t.Fatal(err)
	}
	if le := everywhere.Consumer().(manager.LeaderElectionRunnable); le.NeedLeaderElection() {
		t.Fatal("WithLeaderElection(false): the consumer runs on every replica")
	}
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(5 * time.Millisecond) // polling a condition, not waiting for a race
	}
}

// TestDeliveryBodies: our listener takes the resync fixture as a resync
// event and the heartbeat fixture as last-seen only, and both are within the
// body limit. What Kyma's own listener makes of the same bodies is tested
// with Kyma's listener itself: test/tools/kymalistener and the e2e spec
// labelled kyma-listener.
func TestDeliveryBodies(t *testing.T) {
	var bodies [][]byte
	for _, f := range []string{"testdata/delivery/resync-startup.json", "testdata/delivery/heartbeat.json"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) > contract.MaxEventBodyBytes {
			t.Fatalf("%s over the body limit", b)
		}
		bodies = append(bodies, b)
	}
	s := start(t)
	id := hdr(contract.HeaderRuntimeID, "runtime-a")
	if resp, text := s.do(t, http.MethodPost, s.l.Path(), bytes.NewReader(bodies[0]), id); resp.StatusCode != http.StatusOK {
		t.Fatalf("resync fixture: %d %s", resp.StatusCode, text)
	}
	if r, ok := listener.IsResync(nextEvent(t, s.l.Events()).Object); !ok || r != "startup" {
		t.Fatalf("resync fixture: %q %v", r, ok)
	}
	if resp, text := s.do(t, http.MethodPost, s.l.Path(), bytes.NewReader(bodies[1]), id); resp.StatusCode != http.StatusOK {
		t.Fatalf("heartbeat fixture: %d %s", resp.StatusCode, text)
	}
	noEvent(t, s.l.Events())
}

// stubReader answers the two reads of identity.NewKymaLookup: the list by
// runtime-id index and the get by name.
type stubReader struct {
	labelled map[string][]string // runtime ID -> names of Kymas carrying the label
	named    map[string]bool     // Kymas without label, by name
	err      error
}

func (r stubReader) Get(_ context.Context, key client.ObjectKey, obj client.Object, _ ...client.GetOption) error {
	if r.err != nil {
		return r.err
	}
	if !r.named[key.Name] {
		return apierrors.NewNotFound(schema.GroupResource{Group: "operator.kyma-project.io", Resource: "kymas"}, key.Name)
	}
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	return nil
}

func (r stubReader) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	if r.err != nil {
		return r.err
	}
	lo := (&client.ListOptions{}).ApplyOptions(opts)
	id, _ := lo.FieldSelector.RequiresExactMatch(identity.RuntimeIDField)
	ml := list.(*metav1.PartialObjectMetadataList)
	for _, n := range r.labelled[id] {
		k := identity.NewKyma()
		k.Name, k.Namespace, k.Labels = n, lo.Namespace, map[string]string{contract.LabelRuntimeID: id}
		ml.Items = append(ml.Items, *k)
	}
	return nil
}

// TestEnqueueKyma: the handler enqueues the Kyma the identity lookup finds
// (label before name), for changes and resyncs alike, and nothing for an
// unknown runtime or a failed lookup.
func TestEnqueueKyma(t *testing.T) {
	r := stubReader{
		labelled: map[string][]string{"runtime-l": {"kyma-l"}, "runtime-dup": {"a", "b"}},
		named:    map[string]bool{"runtime-n": true},
	}
	h := listener.EnqueueKyma(r, "kcp-system")
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
	defer q.ShutDown()
	s := start(t)
	send := func(id, b string) event.GenericEvent {
		t.Helper()
		if resp, text := s.do(t, http.MethodPost, s.l.Path(), body(b), hdr(contract.HeaderRuntimeID, id)); resp.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", id, resp.StatusCode, text)
		}
		return nextEvent(t, s.l.Events())
	}
	for _, tc := range []struct {
		id, body, want string
	}{
		{"runtime-l", validBody, "kyma-l"},
		{"runtime-l", resyncBody, "kyma-l"},
		{"runtime-n", resyncBody, "runtime-n"},
		{"runtime-unknown", validBody, ""},
		{"runtime-dup", validBody, ""},
	} {
		h.Generic(context.Background(), send(tc.id, tc.body), q)
		if tc.want == "" {
			if q.Len() != 0 {
				t.Fatalf("%s: enqueued", tc.id)
			}
			continue
		}
		if q.Len() != 1 {
			t.Fatalf("%s: %d items", tc.id, q.Len())
		}
		item, _ := q.Get()
		q.Done(item)
		q.Forget(item)
		if item.NamespacedName != (types.NamespacedName{Namespace: "kcp-system", Name: tc.want}) {
			t.Fatalf("%s: enqueued %v", tc.id, item)
		}
	}
	listener.EnqueueKyma(stubReader{err: errors.New("index missing")}, "kcp-system").Generic(context.Background(), send("runtime-l", validBody), q)
	if q.Len() != 0 {
		t.Fatal("enqueued after a failed lookup")
	}

	// The earlier behaviour stays available: the Kyma named by the runtime ID.
	listener.EnqueueKymaByName("kcp-system").Generic(context.Background(), send("runtime-l", validBody), q)
	if item, _ := q.Get(); item.Name != "runtime-l" {
		t.Fatalf("by name: %v", item)
	}
}

// TestOwner: with WithOwner an event of a runtime another replica owns is
// answered 503 with Retry-After (the gateway retries on another replica)
// and never reaches Events(); the owner's events are delivered; heartbeats
// are recorded wherever they land.
func TestOwner(t *testing.T) {
	s := start(t, listener.WithOwner(func(_ context.Context, runtimeID string) bool { return runtimeID == "runtime-ours" }))
	for _, b := range []string{validBody, resyncBody} {
		resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(b), hdr(contract.HeaderRuntimeID, "runtime-theirs"))
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" {
			t.Fatalf("%s of another replica's runtime: %d, Retry-After %q", b, resp.StatusCode, resp.Header.Get("Retry-After"))
		}
	}
	noEvent(t, s.l.Events())
	if got := metricValue(t, s.reg, listener.MetricNotOwnerRefused, nil); got != 2 {
		t.Fatalf("not-owner refusals = %v, want 2", got)
	}
	if resp, _ := s.do(t, http.MethodPost, s.l.Path(), body(heartbeatBody), hdr(contract.HeaderRuntimeID, "runtime-theirs")); resp.StatusCode != http.StatusOK {
		t.Fatalf("heartbeat of another replica's runtime: %d", resp.StatusCode)
	}
	if resp, text := s.do(t, http.MethodPost, s.l.Path(), body(validBody), hdr(contract.HeaderRuntimeID, "runtime-ours")); resp.StatusCode != http.StatusOK {
		t.Fatalf("event of our runtime: %d %s", resp.StatusCode, text)
	}
	nextEvent(t, s.l.Events())
}
