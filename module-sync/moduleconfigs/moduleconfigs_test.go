package moduleconfigs

// The fake-cluster tier of the mirror controller (test/fakecluster): the
// KCP and a runtime in memory; module-sync/controllers' integration tests
// run the manager against real API servers.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/priorityqueue"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

const ns = "kcp-system"

var (
	ctx           = context.Background()
	serverlessGVK = schema.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1alpha1", Kind: "Serverless"}
	serverless    = mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "serverlesses"}, Module: "serverless"}
)

func kcpScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	fakecluster.AddKyma(s)
	return s
}

func serverlessCR(spec map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(serverlessGVK)
	u.SetNamespace("kyma-system")
	u.SetName("default")
	return u
}

type setup struct {
	kcp, skr *fakecluster.Cluster
	runtimes *fakecluster.Runtimes
	r        *Reconciler
}

// newSetup: a KCP with Kyma kyma-a (runtime runtime-a, with its kubeconfig
// Secret), the runtime with a Serverless CR, and the reconciler as
// controllers.New builds it.
func newSetup(t *testing.T, kcpObjs ...client.Object) *setup {
	t.Helper()
	s := &setup{runtimes: &fakecluster.Runtimes{}}
	kyma := fakecluster.Kyma(ns, "kyma-a", "runtime-a", "")
	s.kcp = fakecluster.New(t, kcpScheme(), fakecluster.WithIndexer(identity.IndexRuntimeID),
		fakecluster.WithObjects(append([]client.Object{kyma, fakecluster.KubeconfigSecret(ns, "runtime-a", false)}, kcpObjs...)...))
	s.skr = fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithKinds(map[schema.GroupVersionKind]bool{serverlessGVK: false}),
		fakecluster.WithObjects(serverlessCR(map[string]any{"replicas": int64(1)})))
	s.runtimes.Add(ns+"/runtime-a", s.skr)
	s.r = &Reconciler{
		Client: s.kcp, Runtimes: &skrclient.Runtimes{Reader: s.kcp, Namespace: ns, Clients: s.runtimes},
		Mirror: &mirror.Mirror{KCP: s.kcp, Resources: []mirror.ModuleResource{serverless}}, Interval: time.Minute,
		Backoff: pacing.NewBackoff(time.Second, time.Minute), Conflicts: pacing.NewBackoff(50*time.Millisecond, time.Minute),
		KymaNamespace: ns, Turns: &pacing.Turns{}, PassTimeout: time.Minute,
	}
	return s
}

var kymaA = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "kyma-a"}}

func passes(result string) float64 {
	return testutil.ToFloat64(syncmetrics.MirrorPasses.WithLabelValues(result))
}
func writes(op string) float64 {
	return testutil.ToFloat64(syncmetrics.MirrorWrites.WithLabelValues(op))
}

func (s *setup) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := s.r.Reconcile(ctx, kymaA)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (s *setup) moduleConfigs(t *testing.T) []v1alpha1.ModuleConfig {
	t.Helper()
	list := &v1alpha1.ModuleConfigList{}
	if err := s.kcp.List(ctx, list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// TestReconcileMirrors: a pass mirrors the runtime (counted as synced, its
// writes by operation) and comes back after the interval; a pass with
// nothing new is "unchanged"; a Kyma that is gone or being deleted takes
// its ModuleConfigs with it.
func TestReconcileMirrors(t *testing.T) {
	s := newSetup(t)
	synced, created := passes("synced"), writes("created")
	res := s.reconcile(t)
	if res.RequeueAfter < time.Minute || res.RequeueAfter > time.Minute+6*time.Second {
		t.Errorf("requeued after %s, want the interval (1m) with jitter", res.RequeueAfter)
	}
	if got := passes("synced") - synced; got != 1 {
		t.Errorf("%v synced passes, want 1", got)
	}
	if got := writes("created") - created; got != 1 {
		t.Errorf("%v created writes, want 1", got)
	}
	mcs := s.moduleConfigs(t)
	if len(mcs) != 1 || mcs[0].Name != "kyma-a-serverless" || mcs[0].Labels["kyma-project.io/runtime-id"] != "runtime-a" ||
		mcs[0].OwnerReferences[0].UID != "uid-kyma-a" {
		t.Fatalf("ModuleConfigs %+v", mcs)
	}
	if got := s.runtimes.Asked(); len(got) != 1 || got[0] != ns+"/runtime-a" {
		t.Errorf("runtime clients asked for %q, want the runtime's key", got)
	}

	unchanged := passes("unchanged")
	endKCP, endSKR := s.kcp.ExpectNoWrites(t), s.skr.ExpectNoWrites(t)
	s.reconcile(t)
	endKCP()
	endSKR()
	if got := passes("unchanged") - unchanged; got != 1 {
		t.Errorf("second pass: %v unchanged passes, want 1", got)
	}

	// Being deleted: the ModuleConfigs go, the pass is "removed".
	kyma := fakecluster.Kyma(ns, "kyma-a", "runtime-a", "")
	if err := s.kcp.Get(ctx, client.ObjectKeyFromObject(kyma), kyma); err != nil {
		t.Fatal(err)
	}
	kyma.SetFinalizers([]string{"someone-else"})
	if err := s.kcp.Update(ctx, kyma); err != nil {
		t.Fatal(err)
	}
	if err := s.kcp.Delete(ctx, kyma); err != nil {
		t.Fatal(err)
	}
	removed, deleted := passes("removed"), writes("deleted")
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("Kyma being deleted: %+v, want no requeue", res)
	}
	if len(s.moduleConfigs(t)) != 0 || passes("removed")-removed != 1 || writes("deleted")-deleted != 1 {
		t.Errorf("Kyma being deleted: ModuleConfigs %v, %v removed passes, %v deletes", s.moduleConfigs(t), passes("removed")-removed, writes("deleted")-deleted)
	}
}

// TestReconcileGoneKyma: a Kyma that does not exist (any more) has its
// ModuleConfigs removed; a failure to remove is retried with backoff.
func TestReconcileGoneKyma(t *testing.T) {
	s := newSetup(t)
	s.reconcile(t)
	s.kcp.Fail(fakecluster.Get, "Kyma", "kyma-a", fakecluster.ErrUnreachable, 1)
	if _, err := s.r.Reconcile(ctx, kymaA); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("a Kyma that cannot be read: %v, want the error (controller-runtime's backoff)", err)
	}
	if err := s.kcp.Delete(ctx, fakecluster.Kyma(ns, "kyma-a", "", "")); err != nil {
		t.Fatal(err)
	}
	failed := passes("failed")
	s.kcp.Fail(fakecluster.Delete, "ModuleConfig", "", fakecluster.ErrUnreachable, 1)
	if res := s.reconcile(t); res.RequeueAfter != time.Second || passes("failed")-failed != 1 {
		t.Errorf("remove failed: %+v, %v failed passes; want the backoff's first delay (1s)", res, passes("failed")-failed)
	}
	if res := s.reconcile(t); res != (reconcile.Result{}) || len(s.moduleConfigs(t)) != 0 {
		t.Errorf("remove: %+v, ModuleConfigs %v", res, s.moduleConfigs(t))
	}
}

// TestReconcileFailures: no kubeconfig, a runtime that cannot be read and
// a write conflict in the KCP each requeue with their backoff (conflicts
// with the fast one) and are counted; a busy runtime waits for its turn.
func TestReconcileFailures(t *testing.T) {
	s := newSetup(t)

	release, _ := s.r.Turns.Take(kymaA.String(), "test", func() {})
	busy := passes("runtime-busy")
	if res := s.reconcile(t); res.RequeueAfter != pacing.Wait || passes("runtime-busy")-busy != 1 {
		t.Errorf("busy runtime: %+v, want requeued after pacing.Wait and counted", res)
	}
	release()

	if err := s.kcp.Delete(ctx, fakecluster.KubeconfigSecret(ns, "runtime-a", false)); err != nil {
		t.Fatal(err)
	}
	noKubeconfig := passes("no-kubeconfig")
	first := s.reconcile(t)
	second := s.reconcile(t)
	if first.RequeueAfter != time.Second || second.RequeueAfter != 2*time.Second || passes("no-kubeconfig")-noKubeconfig != 2 {
		t.Errorf("no kubeconfig: requeued after %s then %s, want 1s then 2s (backoff), counted twice", first.RequeueAfter, second.RequeueAfter)
	}
	if err := s.kcp.Create(ctx, fakecluster.KubeconfigSecret(ns, "runtime-a", false)); err != nil {
		t.Fatal(err)
	}

	failed := passes("failed")
	s.skr.Fail(fakecluster.List, "Serverless", "", fakecluster.ErrUnreachable, 1)
	if res := s.reconcile(t); res.RequeueAfter != 4*time.Second || passes("failed")-failed != 1 {
		t.Errorf("runtime unreachable: %+v, want the backoff's third delay (4s)", res)
	}

	s.kcp.Fail(fakecluster.Create, "ModuleConfig", "", fakecluster.Conflict("moduleconfigs", "kyma-a-serverless"), 2)
	if res := s.reconcile(t); res.RequeueAfter != 50*time.Millisecond {
		t.Errorf("conflict: %+v, want the conflict backoff (50ms)", res)
	}
	if res := s.reconcile(t); res.RequeueAfter != 100*time.Millisecond {
		t.Errorf("second conflict: %+v, want 100ms", res)
	}
	// Success forgets both backoffs.
	if res := s.reconcile(t); res.RequeueAfter < time.Minute {
		t.Errorf("after the conflicts: %+v, want the interval", res)
	}
	if n := s.r.Backoff.NumRequeues(kymaA.String()); n != 0 {
		t.Errorf("backoff not forgotten after a good pass: %d", n)
	}
	if n := s.r.Conflicts.NumRequeues(kymaA.String()); n != 0 {
		t.Errorf("conflict backoff not forgotten after a good pass: %d", n)
	}
}

// TestEnqueueRuntime: an event of a known runtime (found by its runtime-id
// label) enqueues its Kyma at once (never a later pass: the pass
// schedules the confirm pass, TestConfirmPassThroughTheControllerQueue) and
// notes when it came; events of unknown runtimes and objects that are no
// events are dropped, and each is counted.
func TestEnqueueRuntime(t *testing.T) {
	s := newSetup(t, fakecluster.Kyma(ns, "kyma-b", "", ""))
	var arrived arrivals
	h := enqueueRuntime(identity.NewKymaLookup(s.kcp, ns), ns, &arrived)
	q := &recordingQueue{TypedRateLimitingInterface: workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())}
	defer q.ShutDown()
	ev := func(runtimeID string) event.GenericEvent {
		return event.GenericEvent{Object: &unstructured.Unstructured{Object: map[string]any{listener.KeyRuntimeID: runtimeID}}}
	}
	count := func(outcome string) float64 { return testutil.ToFloat64(syncmetrics.Events.WithLabelValues(outcome)) }
	enqueued, unknown, failed := count("enqueued"), count("unknown-runtime"), count("lookup-failed")

	h.Generic(ctx, ev("runtime-a"), q)
	if q.Len() != 1 {
		t.Fatalf("%d queued, want kyma-a", q.Len())
	}
	if got, _ := q.Get(); got != kymaA {
		t.Errorf("queued %v, want %v", got, kymaA)
	} else {
		q.Done(got)
	}
	h.Generic(ctx, ev("kyma-b"), q) // no label: the name
	if got, _ := q.Get(); got.Name != "kyma-b" {
		t.Errorf("queued %v, want kyma-b", got)
	} else {
		q.Done(got)
	}
	h.Generic(ctx, ev("nobody"), q)
	h.Generic(ctx, event.GenericEvent{Object: &metav1.PartialObjectMetadata{}}, q)
	s.kcp.Fail(fakecluster.List, "Kyma", "", fakecluster.ErrUnreachable, -1)
	h.Generic(ctx, ev("runtime-x"), q)
	if q.Len() != 0 {
		t.Errorf("%d queued after unknown runtimes, a non-event and a failed lookup", q.Len())
	}
	if e, u, f := count("enqueued")-enqueued, count("unknown-runtime")-unknown, count("lookup-failed")-failed; e != 2 || u != 1 || f != 1 {
		t.Errorf("events counted: %v enqueued, %v unknown, %v lookup-failed; want 2, 1, 1", e, u, f)
	}
	if len(q.after) != 0 {
		t.Errorf("passes queued for later: %v", q.after)
	}
	for _, kyma := range []string{kymaA.String(), ns + "/kyma-b"} {
		if _, ok := arrived.begin(kyma, time.Now(), 0); !ok {
			t.Errorf("the event of %s not noted", kyma)
		}
	}
	if len(arrived.at) != 0 {
		t.Errorf("noted besides the enqueued events: %v", arrived.at)
	}
}

// recordingQueue records the delays of AddAfter.
type recordingQueue struct {
	workqueue.TypedRateLimitingInterface[reconcile.Request]
	after []time.Duration
}

func (q *recordingQueue) AddAfter(r reconcile.Request, d time.Duration) {
	q.after = append(q.after, d)
	q.TypedRateLimitingInterface.AddAfter(r, d)
}

// TestConfirmPassThroughTheControllerQueue (issue 36, the lost edit): the
// SKR's webhook reports a change before the API server stores it, so the
// pass an event starts may read the Module CR as it was; the confirm pass
// ConfirmDelay later must then mirror the change. It runs the passes as
// controller-runtime's worker does, on controller-runtime's own queue (the
// priority queue, its default): a second, later add of an item that waits
// in the queue merges into the first there, so a confirm pass scheduled
// beside the event's pass was dropped, and the change waited for the
// periodic pass (--mirror-interval).
func TestConfirmPassThroughTheControllerQueue(t *testing.T) {
	s := newSetup(t)
	s.r.ConfirmDelay = 50 * time.Millisecond
	q := priorityqueue.New[reconcile.Request]("confirm-test")
	defer q.ShutDown()
	// pass runs the next pass of the queue as controller-runtime's worker
	// does; false when none comes within the bound (the interval is a
	// minute).
	pass := func() bool {
		t.Helper()
		got := make(chan reconcile.Request, 1)
		go func() {
			if req, shutdown := q.Get(); !shutdown {
				got <- req
			}
		}()
		select {
		case req := <-got:
			res, err := s.r.Reconcile(ctx, req)
			if err != nil {
				t.Fatalf("Reconcile: %v", err)
			}
			q.Forget(req)
			if res.RequeueAfter > 0 {
				q.AddWithOpts(priorityqueue.AddOpts{After: res.RequeueAfter}, req)
			}
			q.Done(req)
			return true
		case <-time.After(10 * time.Second):
			return false
		}
	}
	s.reconcile(t) // the runtime mirrored, its next pass a minute away
	ev := event.GenericEvent{Object: &unstructured.Unstructured{Object: map[string]any{listener.KeyRuntimeID: "runtime-a"}}}
	enqueueRuntime(identity.NewKymaLookup(s.kcp, ns), ns, &s.r.arrivals).Generic(ctx, ev, q)
	if !pass() {
		t.Fatal("no pass for the event")
	}
	// The change is stored only now: the event's pass read the CR as it was.
	if err := s.skr.Patch(ctx, serverlessCR(nil), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"replicas":2}}`))); err != nil {
		t.Fatal(err)
	}
	if !pass() {
		t.Fatal("no confirm pass within 10 s of the event (ConfirmDelay 50 ms): the change waits for the periodic pass")
	}
	mcs := s.moduleConfigs(t)
	if len(mcs) != 1 || !strings.Contains(string(mcs[0].Spec.Resource.Raw), `"replicas":2`) {
		t.Errorf("after the confirm pass the ModuleConfig holds %v, want the stored change (replicas 2)", mcs)
	}
}

// TestArrivalsConfirm: a pass that takes an event makes the confirm pass
// due ConfirmDelay later; every pass until then asks to come back by then
// at the latest, the first pass at or after it is the confirm pass, and
// after it the passes keep their own delay.
func TestArrivalsConfirm(t *testing.T) {
	var a arrivals
	t0 := time.Date(2026, 11, 27, 15, 0, 0, 0, time.UTC)
	const rt = ns + "/kyma-a"
	if _, ok := a.begin(rt, t0, 2*time.Second); ok {
		t.Error("a pass took an event that never came")
	}
	if d := a.next(rt, t0, time.Minute); d != time.Minute {
		t.Errorf("no event: next pass after %v, want the interval", d)
	}
	a.note(rt, t0)
	a.note(rt, t0.Add(time.Millisecond)) // a second event before the pass: counted from the first
	if at, ok := a.begin(rt, t0.Add(10*time.Millisecond), 2*time.Second); !ok || !at.Equal(t0) {
		t.Errorf("the event's pass took %v, %v; want the first event at %v", at, ok, t0)
	}
	if d := a.next(rt, t0.Add(20*time.Millisecond), time.Minute); d != 1990*time.Millisecond {
		t.Errorf("after the event's pass: next after %v, want the confirm pass in 1.99 s", d)
	}
	if d := a.next(rt, t0.Add(20*time.Millisecond), 50*time.Millisecond); d != 50*time.Millisecond {
		t.Errorf("a retry sooner than the confirm pass: next after %v, want 50ms", d)
	}
	// A pass woken before the confirm pass is due (its turn came) is not it.
	a.begin(rt, t0.Add(time.Second), 2*time.Second)
	if d := a.next(rt, t0.Add(time.Second), time.Minute); d != 1010*time.Millisecond {
		t.Errorf("after an earlier pass: next after %v, want the confirm pass in 1.01 s", d)
	}
	a.begin(rt, t0.Add(2010*time.Millisecond), 2*time.Second) // the confirm pass
	if d := a.next(rt, t0.Add(2020*time.Millisecond), time.Minute); d != time.Minute {
		t.Errorf("after the confirm pass: next after %v, want the interval", d)
	}
}

// TestLostRuntimesForgetTheirClients: when the membership changes, a
// replica drops the clients (the module users' too) of the runtimes
// another replica owns now, and keeps those of its own.
func TestLostRuntimesForgetTheirClients(t *testing.T) {
	var kymas []client.Object
	for i := range 8 {
		kymas = append(kymas, fakecluster.Kyma(ns, fmt.Sprintf("kyma-%d", i), fmt.Sprintf("runtime-%d", i), ""))
	}
	s := newSetup(t, kymas...)
	members := fakecluster.ShardMembers(t, ns, "module-sync", "ms-0", "ms-1")
	s.r.Shards = members["ms-0"]
	s.r.Shards.OnChange(s.r.gained)
	fakecluster.StartSource(t, s.r.requeue.Source())
	// ms-0 alone, then ms-1 joins: ms-0 adopts the view of both.
	members.Join(t.Context(), "ms-0", "ms-1")

	want := []string{}
	for _, k := range append([]client.Object{fakecluster.Kyma(ns, "kyma-a", "runtime-a", "")}, kymas...) {
		if shards.Owner(client.ObjectKeyFromObject(k).String(), []string{"ms-0", "ms-1"}) == "ms-1" {
			want = append(want, s.r.Runtimes.Key(identity.RuntimeIDOf(k)))
		}
	}
	if len(want) == 0 || len(want) == len(kymas)+1 {
		t.Fatalf("the hash gave ms-1 %d of %d runtimes; pick other names", len(want), len(kymas)+1)
	}
	got := s.runtimes.Forgotten()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("forgot the clients of %v, want those ms-1 owns now: %v", got, want)
	}
}
