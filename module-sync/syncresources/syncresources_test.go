package syncresources

// The fake-cluster tier of the SyncResource controller (test/fakecluster):
// the KCP and a runtime in memory; module-sync's integration and e2e tests
// run it against real API servers.

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

const ns = "kcp-system"

var (
	ctx   = context.Background()
	clock = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	srKey = reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "sr"}}
)

func kcpScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	fakecluster.AddKyma(s)
	return s
}

func configMapItem(name, value string) v1alpha1.SyncItem {
	return v1alpha1.SyncItem{Name: name, Strategy: v1alpha1.CreateAndSync, Resource: k8sruntime.RawExtension{Raw: []byte(fmt.Sprintf(
		`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":"team-a"},"data":{"v":%q}}`, name, value))}}
}

func syncResource(writer string, items ...v1alpha1.SyncItem) *v1alpha1.SyncResource {
	return &v1alpha1.SyncResource{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "sr", Generation: 1, Annotations: map[string]string{v1alpha1.AnnotationWrittenBy: writer}},
		Spec:       v1alpha1.SyncResourceSpec{Kyma: "kyma-a", Module: "mod", Items: items},
	}
}

func moduleGrant() *v1alpha1.ModuleGrant {
	return &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mod"},
		Spec: v1alpha1.ModuleGrantSpec{Managers: []string{"alice"}, Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}, {Kind: "ServiceAccount"}}, Namespaces: []string{"team-a"}}}
}

type setup struct {
	kcp, skr *fakecluster.Cluster
	runtimes *fakecluster.Runtimes
	r        *Reconciler
}

// policyActive makes the runtime's API server refuse the probe's Pod as
// the workload policy does.
var policyActive = apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "probe",
	errors.New("ValidatingAdmissionPolicy 'module-workloads' denied request: a module's Pod may not use the Secrets of the watcher bundle"))

// newSetup: a KCP with Kyma kyma-a (runtime runtime-a), its kubeconfig
// Secret, the grant of module mod naming alice and kcpObjs; the runtime
// with namespace team-a whose API server enforces the workload policy.
func newSetup(t *testing.T, kcpObjs ...client.Object) *setup {
	t.Helper()
	s := &setup{runtimes: &fakecluster.Runtimes{}}
	s.kcp = fakecluster.New(t, kcpScheme(), fakecluster.WithIndexer(indexFields),
		fakecluster.WithObjects(append([]client.Object{fakecluster.Kyma(ns, "kyma-a", "runtime-a", ""),
			fakecluster.KubeconfigSecret(ns, "runtime-a", false), moduleGrant()}, kcpObjs...)...))
	s.skr = fakecluster.New(t, clientgoscheme.Scheme, fakecluster.WithObjects(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}))
	s.skr.Fail(fakecluster.Create, "Pod", "", policyActive, -1)
	s.runtimes.Add(ns+"/runtime-a", s.skr)
	s.r = &Reconciler{
		Client: s.kcp, Runtimes: &skrclient.Runtimes{Reader: s.kcp, Namespace: ns, Clients: s.runtimes},
		Interval: time.Minute, Backoff: pacing.NewBackoff(time.Second, time.Minute), Turns: &pacing.Turns{},
		PassTimeout: time.Minute, now: func() metav1.Time { return clock },
	}
	return s
}

func (s *setup) reconcile(t *testing.T) reconcile.Result {
	t.Helper()
	res, err := s.r.Reconcile(ctx, srKey)
	if err != nil {
		t.Fatalf("Reconcile: %v", err)
	}
	return res
}

func (s *setup) get(t *testing.T) *v1alpha1.SyncResource {
	t.Helper()
	sr := &v1alpha1.SyncResource{}
	if err := s.kcp.Get(ctx, srKey.NamespacedName, sr); err != nil {
		t.Fatal(err)
	}
	return sr
}

func synced(t *testing.T, sr *v1alpha1.SyncResource) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(sr.Status.Conditions, syncitems.ConditionSynced)
	if c == nil {
		t.Fatalf("no %s condition in %+v", syncitems.ConditionSynced, sr.Status)
	}
	return c
}

func reconciles(result string) float64 {
	return testutil.ToFloat64(syncmetrics.SyncReconciles.WithLabelValues(result))
}

func (s *setup) configMap(t *testing.T, name string) *corev1.ConfigMap {
	t.Helper()
	cm := &corev1.ConfigMap{}
	if err := s.skr.Get(ctx, client.ObjectKey{Namespace: "team-a", Name: name}, cm); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		t.Fatal(err)
	}
	return cm
}

// TestReconcileApplies: a pass adds the finalizer, renders the module's
// RBAC into the runtime, applies the items as the module's user and
// writes a Ready status; the drift pass after the interval writes nothing
// to the KCP when nothing changed; deleting the SyncResource removes what
// it created, then the finalizer.
func TestReconcileApplies(t *testing.T) {
	s := newSetup(t, syncResource("alice", configMapItem("cm", "1")))
	applied := reconciles("applied")
	res := s.reconcile(t)
	if res.RequeueAfter < time.Minute || res.RequeueAfter > time.Minute+6*time.Second {
		t.Errorf("requeued after %s, want the drift interval (1m) with jitter", res.RequeueAfter)
	}
	if got := reconciles("applied") - applied; got != 1 {
		t.Errorf("%v applied reconciles, want 1", got)
	}
	sr := s.get(t)
	if !controllerutil.ContainsFinalizer(sr, Finalizer) {
		t.Error("no finalizer")
	}
	c := synced(t, sr)
	if sr.Status.State != v1alpha1.StateReady || c.Status != metav1.ConditionTrue || c.Reason != "Applied" || c.ObservedGeneration != 1 ||
		sr.Status.LastOperation == nil || !sr.Status.LastOperation.LastUpdateTime.Equal(&clock) {
		t.Errorf("status %+v", sr.Status)
	}
	if len(sr.Status.Items) != 1 || sr.Status.Items[0].State != v1alpha1.ItemReady || sr.Status.Items[0].Object == nil {
		t.Errorf("items %+v", sr.Status.Items)
	}
	if cm := s.configMap(t, "cm"); cm == nil || cm.Data["v"] != "1" || cm.Annotations[syncitems.OwnerAnnotation] != ns+"/sr" {
		t.Errorf("ConfigMap in the runtime: %+v", cm)
	}
	if err := s.skr.Get(ctx, client.ObjectKey{Name: grants.User("mod") + ":namespaced"}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"}}); err != nil {
		t.Errorf("the module's RBAC in the runtime: %v", err)
	}
	asked := strings.Join(s.runtimes.Asked(), ",")
	if !strings.Contains(asked, ns+"/runtime-a\x00"+grants.User("mod")) || !strings.Contains(asked, ns+"/runtime-a\x00"+grants.ProbeUser) {
		t.Errorf("runtime clients %q: want the module's user and the probe user", asked)
	}

	// The drift pass writes nothing to the KCP; in the runtime it applies
	// the item again (that is how drift is repaired) and nothing else (the
	// module's RBAC is in place).
	endKCP := s.kcp.ExpectNoWrites(t)
	endSKR := s.skr.ExpectNoWrites(t, fakecluster.Write{Verb: fakecluster.Apply, Kind: "ConfigMap", Namespace: "team-a", Name: "cm"})
	s.reconcile(t)
	endKCP()
	endSKR()

	// Deletion: the ConfigMap goes, then the finalizer (and the object).
	if err := s.kcp.Delete(ctx, s.get(t)); err != nil {
		t.Fatal(err)
	}
	cleaned := reconciles("cleaned-up")
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("deletion: %+v", res)
	}
	if s.configMap(t, "cm") != nil {
		t.Error("the ConfigMap stayed after the SyncResource's deletion")
	}
	if err := s.kcp.Get(ctx, srKey.NamespacedName, &v1alpha1.SyncResource{}); !apierrors.IsNotFound(err) {
		t.Errorf("the SyncResource after its finalizer: %v, want gone", err)
	}
	if reconciles("cleaned-up")-cleaned != 1 {
		t.Error("cleanup not counted")
	}
	// Gone: nothing to do.
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("gone: %+v", res)
	}
}

// TestReconcileNotOurs: a SyncResource being deleted that does not carry
// module-sync's finalizer (never applied) is left alone: nothing is
// cleaned up, nothing written.
func TestReconcileNotOurs(t *testing.T) {
	sr := syncResource("alice", configMapItem("cm", "1"))
	sr.Finalizers = []string{"someone-else"}
	sr.Status.Items = []v1alpha1.ItemStatus{{Name: "cm", Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "cm"}}}
	s := newSetup(t, sr)
	if err := s.skr.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "cm",
		Annotations: map[string]string{syncitems.OwnerAnnotation: ns + "/sr"}}}); err != nil {
		t.Fatal(err)
	}
	if err := s.kcp.Delete(ctx, s.get(t)); err != nil {
		t.Fatal(err)
	}
	endKCP, endSKR := s.kcp.ExpectNoWrites(t), s.skr.ExpectNoWrites(t)
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("not ours: %+v", res)
	}
	endKCP()
	endSKR()
	if s.configMap(t, "cm") == nil {
		t.Error("a SyncResource without module-sync's finalizer was cleaned up")
	}
}

// TestReconcileCleanupFails: a cleanup that fails keeps the finalizer,
// says so in the status (Deleting, CleanupFailed) and is retried with
// backoff; without its Kyma the runtime counts as gone and the finalizer
// goes.
func TestReconcileCleanupFails(t *testing.T) {
	s := newSetup(t, syncResource("alice", configMapItem("cm", "1")))
	s.reconcile(t)
	if err := s.kcp.Delete(ctx, s.get(t)); err != nil {
		t.Fatal(err)
	}
	s.skr.Fail(fakecluster.Delete, "ConfigMap", "cm", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := s.reconcile(t); res.RequeueAfter != time.Second {
		t.Errorf("cleanup failed: %+v, want the backoff (1s)", res)
	}
	sr := s.get(t)
	if c := synced(t, sr); sr.Status.State != v1alpha1.StateDeleting || c.Reason != "CleanupFailed" || !controllerutil.ContainsFinalizer(sr, Finalizer) {
		t.Errorf("cleanup failed: state %s, condition %+v, finalizers %v", sr.Status.State, c, sr.Finalizers)
	}
	if s.configMap(t, "cm") == nil {
		t.Fatal("the ConfigMap went although its delete failed")
	}
	if err := s.kcp.Delete(ctx, fakecluster.Kyma(ns, "kyma-a", "", "")); err != nil {
		t.Fatal(err)
	}
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("Kyma gone: %+v", res)
	}
	if err := s.kcp.Get(ctx, srKey.NamespacedName, &v1alpha1.SyncResource{}); !apierrors.IsNotFound(err) {
		t.Errorf("Kyma gone: the SyncResource kept its finalizer (%v)", err)
	}
}

// TestReconcileWriterRefused: a SyncResource whose writer the grant does
// not name reaches no runtime: every item Refused, the inventory kept
// (removed items too), state Refused, no requeue (the grant watch brings
// it back); a platform writer is applied without being named.
func TestReconcileWriterRefused(t *testing.T) {
	old := &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "old"}
	sr := syncResource("mallory", configMapItem("cm", "1"))
	sr.Status.Items = []v1alpha1.ItemStatus{{Name: "cm", State: v1alpha1.ItemReady, Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "team-a", Name: "cm"}},
		{Name: "gone", State: v1alpha1.ItemReady, Object: old}}
	s := newSetup(t, sr)
	refused := reconciles("writer-refused")
	if res := s.reconcile(t); res != (reconcile.Result{}) {
		t.Errorf("writer refused: %+v, want no requeue", res)
	}
	got := s.get(t)
	c := synced(t, got)
	if got.Status.State != v1alpha1.StateRefused || c.Reason != "WriterNotGranted" || !strings.Contains(c.Message, `written by "mallory"`) {
		t.Errorf("status %s %+v", got.Status.State, c)
	}
	if len(got.Status.Items) != 2 || got.Status.Items[0].State != v1alpha1.ItemRefused || got.Status.Items[0].Object == nil ||
		got.Status.Items[1].Name != "gone" || *got.Status.Items[1].Object != *old || !strings.HasPrefix(got.Status.Items[1].Message, "removed from the spec; not deleted") {
		t.Errorf("items %+v: want both refused with their inventory", got.Status.Items)
	}
	if reconciles("writer-refused")-refused != 1 {
		t.Error("not counted")
	}
	if len(s.runtimes.Asked()) != 0 || s.configMap(t, "cm") != nil {
		t.Errorf("a refused writer reached the runtime: %q", s.runtimes.Asked())
	}

	// An empty platform writer names nobody: a SyncResource without a
	// writer stays refused.
	anonymous := s.get(t)
	delete(anonymous.Annotations, v1alpha1.AnnotationWrittenBy)
	if err := s.kcp.Update(ctx, anonymous); err != nil {
		t.Fatal(err)
	}
	s.r.PlatformWriters = []string{""}
	s.reconcile(t)
	if got := s.get(t); got.Status.State != v1alpha1.StateRefused || !strings.Contains(synced(t, got).Message, "written by nobody") {
		t.Errorf("no writer, an empty platform writer: %s %+v", got.Status.State, synced(t, got))
	}
	anonymous = s.get(t)
	anonymous.Annotations = map[string]string{v1alpha1.AnnotationWrittenBy: "mallory"}
	if err := s.kcp.Update(ctx, anonymous); err != nil {
		t.Fatal(err)
	}
	s.r.PlatformWriters = []string{"mallory"}
	s.reconcile(t)
	if got := s.get(t); got.Status.State != v1alpha1.StateReady || s.configMap(t, "cm") == nil {
		t.Errorf("a platform writer: state %s", got.Status.State)
	}
}

// TestReconcileNoRuntime: without its Kyma, its kubeconfig Secret or an
// active workload policy a SyncResource is not applied; the status says
// why (KymaNotFound without requeue, the others with backoff); a runtime
// that does not answer the probe has every item "not attempted".
func TestReconcileNoRuntime(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cut     func(s *setup)
		reason  string
		state   v1alpha1.State
		requeue time.Duration
	}{
		{"no Kyma", func(s *setup) { _ = s.kcp.Delete(ctx, fakecluster.Kyma(ns, "kyma-a", "", "")) }, "KymaNotFound", v1alpha1.StateError, 0},
		{"no kubeconfig", func(s *setup) { _ = s.kcp.Delete(ctx, fakecluster.KubeconfigSecret(ns, "runtime-a", false)) }, "NoKubeconfig", v1alpha1.StateError, time.Second},
		{"policy not active", func(s *setup) { s.skr.Heal() }, "WorkloadPolicyNotActive", v1alpha1.StateError, time.Second},
		{"runtime unreachable", func(s *setup) {
			s.skr.Heal()
			s.skr.Fail(fakecluster.Create, "Pod", "", fakecluster.ErrUnreachable, -1)
		}, "RuntimeUnreachable", v1alpha1.StateError, time.Second},
		{"kubeconfig refused", func(s *setup) { s.runtimes.Refuse(ns+"/runtime-a", errors.New("kubeconfig user uses an exec plugin")) }, "RuntimeUnreachable", v1alpha1.StateError, time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newSetup(t, syncResource("alice", configMapItem("cm", "1")))
			tc.cut(s)
			noRuntime := reconciles("no-runtime")
			res := s.reconcile(t)
			if res.RequeueAfter != tc.requeue {
				t.Errorf("requeued after %s, want %s", res.RequeueAfter, tc.requeue)
			}
			sr := s.get(t)
			if c := synced(t, sr); sr.Status.State != tc.state || c.Reason != tc.reason || c.Status != metav1.ConditionFalse {
				t.Errorf("state %s, condition %+v; want %s, %s", sr.Status.State, c, tc.state, tc.reason)
			}
			if s.configMap(t, "cm") != nil {
				t.Error("applied without a runtime")
			}
			if tc.name == "runtime unreachable" { // reported per item, as apply.Unreachable
				if len(sr.Status.Items) != 1 || sr.Status.Items[0].Message != "not attempted: the runtime cannot be reached" {
					t.Errorf("items %+v: want not attempted", sr.Status.Items)
				}
			} else if reconciles("no-runtime")-noRuntime != 1 {
				t.Error("not counted as no-runtime")
			}
		})
	}
}

// TestReconcileRetries: an item that fails for a reason that may pass (an
// API error) and RBAC that cannot be written requeue with backoff; a
// refused item waits for a change (the drift interval); a status write
// that fails is the reconcile's error.
func TestReconcileRetries(t *testing.T) {
	s := newSetup(t, syncResource("alice", configMapItem("cm", "1")))
	s.skr.Fail(fakecluster.Apply, "ClusterRole", grants.User("mod")+":namespaced", apierrors.NewInternalError(errors.New("etcd")), 1)
	retry := reconciles("retry")
	if res := s.reconcile(t); res.RequeueAfter != time.Second || reconciles("retry")-retry != 1 {
		t.Errorf("RBAC failed: %+v, want the backoff", res)
	}
	if sr := s.get(t); sr.Status.State != v1alpha1.StateReady {
		t.Errorf("RBAC failed: the items still apply, state %s", sr.Status.State)
	}
	s.skr.Fail(fakecluster.Apply, "ConfigMap", "cm", apierrors.NewInternalError(errors.New("etcd")), 1)
	if res := s.reconcile(t); res.RequeueAfter != 2*time.Second {
		t.Errorf("item failed: %+v, want the backoff's second delay", res)
	}
	if sr := s.get(t); sr.Status.State != v1alpha1.StateError || synced(t, sr).Reason != "ItemsFailed" {
		t.Errorf("item failed: %s %+v", sr.Status.State, synced(t, sr))
	}
	if res := s.reconcile(t); res.RequeueAfter < time.Minute {
		t.Errorf("good pass: %+v, want the interval", res)
	}

	sr := s.get(t)
	sr.Spec.Items = append(sr.Spec.Items, v1alpha1.SyncItem{Name: "secret", Strategy: v1alpha1.CreateAndSync,
		Resource: k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"team-a"}}`)}})
	sr.Generation = 2
	if err := s.kcp.Update(ctx, sr); err != nil {
		t.Fatal(err)
	}
	failed := reconciles("failed")
	if res := s.reconcile(t); res.RequeueAfter < time.Minute || reconciles("failed")-failed != 1 {
		t.Errorf("refused item: %+v, want the interval and counted as failed", res)
	}
	if sr := s.get(t); sr.Status.State != v1alpha1.StateWarning || synced(t, sr).Reason != "ItemsRefused" {
		t.Errorf("refused item: %s %+v", sr.Status.State, synced(t, sr))
	}

	s.kcp.Fail(fakecluster.StatusUpdate, "SyncResource", "sr", fakecluster.Conflict("syncresources", "sr"), 1)
	s.skr.Fail(fakecluster.Apply, "ConfigMap", "cm", apierrors.NewInternalError(errors.New("etcd")), 1) // a status change
	if _, err := s.r.Reconcile(ctx, srKey); !apierrors.IsConflict(err) {
		t.Errorf("status conflict: %v, want it returned", err)
	}
	fresh := newSetup(t, syncResource("alice"))
	fresh.kcp.Fail(fakecluster.Update, "SyncResource", "", fakecluster.Conflict("syncresources", "sr"), 1)
	if _, err := fresh.r.Reconcile(ctx, srKey); !apierrors.IsConflict(err) {
		t.Errorf("finalizer conflict: %v", err)
	}
	fresh.kcp.Fail(fakecluster.Get, "ModuleGrant", "", fakecluster.ErrUnreachable, 1)
	if _, err := fresh.r.Reconcile(ctx, srKey); !errors.Is(err, fakecluster.ErrUnreachable) {
		t.Errorf("grant unreadable: %v", err)
	}
	release, _ := fresh.r.Turns.Take(ns+"/kyma-a", "test", func() {})
	defer release()
	if res := fresh.reconcile(t); res.RequeueAfter != pacing.Wait {
		t.Errorf("runtime busy: %+v", res)
	}
}

// TestServiceAccountsOfTheModule: the ServiceAccounts a module created
// through its applied SyncResources of the runtime (not other runtimes',
// other modules' nor a refused writer's) are what its workloads may run as.
func TestServiceAccountsOfTheModule(t *testing.T) {
	sa := func(name, writer, kyma string) *v1alpha1.SyncResource {
		sr := syncResource(writer)
		sr.Name, sr.Spec.Kyma = name, kyma
		sr.Status.Items = []v1alpha1.ItemStatus{{Name: "sa", Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ServiceAccount", Namespace: "team-a", Name: name}}}
		return sr
	}
	otherModule := sa("other-module", "alice", "kyma-a")
	otherModule.Spec.Module = "other"
	s := newSetup(t, syncResource("alice"), sa("mine", "alice", "kyma-a"), sa("refused", "mallory", "kyma-a"), sa("elsewhere", "alice", "kyma-b"), otherModule)
	s.reconcile(t)
	cm := &corev1.ConfigMap{}
	if err := s.skr.Get(ctx, client.ObjectKey{Namespace: grants.WorkloadParamsNamespace, Name: grants.WorkloadParamsName}, cm); err != nil {
		t.Fatal(err)
	}
	if got := cm.Data["mod.serviceAccounts"]; got != "team-a/mine" {
		t.Errorf("the module's ServiceAccounts %q, want team-a/mine", got)
	}
}

// TestMapping: a Kyma's and a grant's events enqueue their SyncResources;
// the predicates pass what the controller reacts to.
func TestMapping(t *testing.T) {
	other := syncResource("alice")
	other.Name, other.Spec.Kyma, other.Spec.Module = "other", "kyma-b", "other"
	s := newSetup(t, syncResource("alice"), other)
	if got := s.r.forKyma(ctx, fakecluster.Kyma(ns, "kyma-a", "", "")); len(got) != 1 || got[0] != srKey {
		t.Errorf("Kyma kyma-a: %v", got)
	}
	if got := s.r.forGrant(ctx, moduleGrant()); len(got) != 1 || got[0] != srKey {
		t.Errorf("grant mod: %v", got)
	}
	s.kcp.Fail(fakecluster.List, "SyncResource", "", fakecluster.ErrUnreachable, 1)
	if got := s.r.forKyma(ctx, fakecluster.Kyma(ns, "kyma-a", "", "")); len(got) != 0 {
		t.Errorf("list failed: %v", got)
	}

	now := metav1.Now()
	live, deleting := syncResource("alice"), syncResource("alice")
	deleting.DeletionTimestamp = &now
	if !(deletionStarted{}).Update(event.UpdateEvent{ObjectOld: live, ObjectNew: deleting}) ||
		(deletionStarted{}).Update(event.UpdateEvent{ObjectOld: live, ObjectNew: live}) ||
		(deletionStarted{}).Create(event.CreateEvent{}) || (deletionStarted{}).Delete(event.DeleteEvent{}) || (deletionStarted{}).Generic(event.GenericEvent{}) {
		t.Error("deletionStarted passes only the update that sets the deletion timestamp")
	}
	if !(kymaCreatedOrDeleted{}).Create(event.CreateEvent{}) || !(kymaCreatedOrDeleted{}).Delete(event.DeleteEvent{}) ||
		(kymaCreatedOrDeleted{}).Update(event.UpdateEvent{}) || (kymaCreatedOrDeleted{}).Generic(event.GenericEvent{}) {
		t.Error("kymaCreatedOrDeleted passes creations and deletions only")
	}
}

// TestNoModule: a SyncResource without spec.module writes nothing: every
// item is refused naming why.
func TestNoModule(t *testing.T) {
	sr := syncResource("alice", configMapItem("cm", "1"))
	sr.Spec.Module = ""
	s := newSetup(t, sr)
	// Nothing in the runtime; in the KCP the SyncResource's finalizer
	// (added before its items are looked at) and the status that says why.
	s.skr.ExpectNoWrites(t)
	s.kcp.ExpectNoWrites(t, fakecluster.Write{Verb: fakecluster.Update, Kind: "SyncResource", Namespace: ns, Name: "sr"},
		fakecluster.Write{Verb: fakecluster.StatusUpdate, Kind: "SyncResource", Namespace: ns, Name: "sr"})
	s.reconcile(t)
	got := s.get(t)
	if got.Status.State != v1alpha1.StateWarning || len(got.Status.Items) != 1 || got.Status.Items[0].State != v1alpha1.ItemRefused ||
		!strings.Contains(got.Status.Items[0].Message, "spec.module is not set") {
		t.Errorf("no module: %s %+v", got.Status.State, got.Status.Items)
	}
	if s.configMap(t, "cm") != nil {
		t.Error("applied without a module")
	}
}
