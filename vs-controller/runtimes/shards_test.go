package runtimes

import (
	"fmt"
	"slices"
	"testing"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// member is a shard member that has not run a round: it owns nothing yet
// (fenced until its first renewal).
func member(t *testing.T) *shards.Shards {
	t.Helper()
	return fakecluster.ShardMembers(t, kymaNS, "vs-controller", "vs-0")["vs-0"]
}

// TestNotOwnerWritesNothing: a replica that does not own a runtime begins
// no pass over it — no finalizer, no Certificate, nothing in the SKR.
func TestNotOwnerWritesNothing(t *testing.T) {
	s := newSetup(t)
	s.r.Shards = member(t)
	if res := s.reconcile(t); res.RequeueAfter != 0 {
		t.Errorf("not-owner pass asks to come back after %s", res.RequeueAfter)
	}
	kyma := NewKyma()
	if err := s.kcp.Get(ctx, kymaA.NamespacedName, kyma); err != nil {
		t.Fatal(err)
	}
	if len(kyma.Finalizers) != 0 {
		t.Errorf("finalizers %v written by a replica that does not own the runtime", kyma.Finalizers)
	}
	if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name("runtime-a")}, &certmanagerv1.Certificate{}); err == nil {
		t.Error("a Certificate written by a replica that does not own the runtime")
	}
}

// TestHealthRuntimesWithShards: with shards the health evaluator stays on
// the elected replica and looks after every runtime whose pass completed
// on any replica — known from the trust evidence on its Certificate — not
// only those this process pushed.
func TestHealthRuntimesWithShards(t *testing.T) {
	kyma := fakecluster.Kyma(kymaNS, "kyma-b", "runtime-b", "b.example.com")
	kyma.SetFinalizers([]string{Finalizer})
	crt := &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: certificates.Name("runtime-b")}}
	s := newSetup(t, kyma, crt)
	s.r.Trust = &trust.Keeper{}
	list := func() []string {
		t.Helper()
		rts, err := s.r.HealthRuntimes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, rt := range rts {
			ids = append(ids, rt.ID)
		}
		return ids
	}
	s.r.Shards = member(t)
	if got := list(); len(got) != 0 {
		t.Errorf("before any push: %v, want none", got)
	}
	if err := s.kcp.Get(ctx, client.ObjectKeyFromObject(crt), crt); err != nil {
		t.Fatal(err)
	}
	crt.Annotations = map[string]string{trust.AnnotationEvidence: `{"ca":"x"}`}
	if err := s.kcp.Update(ctx, crt); err != nil {
		t.Fatal(err)
	}
	if got := list(); len(got) != 1 || got[0] != "runtime-b" {
		t.Errorf("pushed by another replica: %v, want [runtime-b]", got)
	}
	s.r.Shards = nil
	if got := list(); len(got) != 0 {
		t.Errorf("without shards (the passes of this process only): %v, want none", got)
	}
}

// TestLostRuntimesForgetTheirClients: when the membership changes, a
// replica drops the runtime clients (connections, REST mappers) of the
// runtimes another replica owns now, and keeps those of its own.
func TestLostRuntimesForgetTheirClients(t *testing.T) {
	var kymas []client.Object
	for i := range 8 {
		kymas = append(kymas, fakecluster.Kyma(kymaNS, fmt.Sprintf("kyma-%d", i), fmt.Sprintf("runtime-%d", i), "x.example.com"))
	}
	s := newSetup(t, kymas...)
	members := fakecluster.ShardMembers(t, kymaNS, "vs-controller", "vs-0", "vs-1")
	s.r.Shards = members["vs-0"]
	s.r.Shards.OnChange(s.r.gained)
	fakecluster.StartSource(t, s.r.requeue.Source())
	// vs-0 alone, then vs-1 joins: vs-0 adopts the view of both.
	members.Join(ctx, "vs-0", "vs-1")

	want := []string{}
	for _, k := range append([]client.Object{fakecluster.Kyma(kymaNS, "kyma-a", "", "")}, kymas...) {
		key := client.ObjectKeyFromObject(k).String()
		if shards.Owner(key, []string{"vs-0", "vs-1"}) == "vs-1" {
			want = append(want, key)
		}
	}
	if len(want) == 0 || len(want) == len(kymas)+1 {
		t.Fatalf("the hash gave vs-1 %d of %d runtimes; pick other names", len(want), len(kymas)+1)
	}
	got := s.runtimes.Forgotten()
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("forgot the clients of %v, want those vs-1 owns now: %v", got, want)
	}
}

// TestCertificateNamesItsReplica: the runtime's Certificate carries the
// identity of the replica that keeps the runtime (shards.LabelOwner), and
// no such label without shards.
func TestCertificateNamesItsReplica(t *testing.T) {
	owner := func(s *setup) (string, bool) {
		t.Helper()
		crt := &certmanagerv1.Certificate{}
		if err := s.kcp.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name("runtime-a")}, crt); err != nil {
			t.Fatal(err)
		}
		v, ok := crt.Labels[shards.LabelOwner]
		return v, ok
	}
	single := newSetup(t)
	single.reconcile(t)
	if v, ok := owner(single); ok {
		t.Errorf("a single replica labelled the Certificate %q", v)
	}

	s := newSetup(t)
	members := fakecluster.ShardMembers(t, kymaNS, "vs-controller", "vs-0")
	members.Settle(ctx, "vs-0")
	s.r.Shards = members["vs-0"]
	s.reconcile(t)
	if v, _ := owner(s); v != "vs-0" {
		t.Errorf("Certificate owner label %q, want vs-0", v)
	}
}

// TestHealthRuntimesCarryTheBundlesManagers: each runtime's health report
// speaks for the managers of the webhooks its bundle carries (issue 40):
// those of the Watchers that get a webhook, not of a Watcher whose spec
// gives it none.
func TestHealthRuntimesCarryTheBundlesManagers(t *testing.T) {
	kyma := fakecluster.Kyma(kymaNS, "kyma-b", "runtime-b", "b.example.com")
	kyma.SetFinalizers([]string{Finalizer})
	crt := &certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: certificates.Name("runtime-b"),
		Annotations: map[string]string{trust.AnnotationEvidence: `{"ca":"x"}`}}}
	routed, vs := routedWatcher("w", "lifecycle-manager")
	broken, _ := routedWatcher("broken", "broken-spec")
	broken.Spec.ServiceInfo.Port = 0 // no webhook in any runtime
	s := newSetup(t, kyma, crt, routed, vs, broken)
	s.r.Trust = &trust.Keeper{}
	s.r.Shards = member(t)
	rts, err := s.r.HealthRuntimes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(rts) != 1 || rts[0].ID != "runtime-b" {
		t.Fatalf("runtimes %v, want runtime-b", rts)
	}
	if got := rts[0].Managers; len(got) != 1 || !got["lifecycle-manager"] {
		t.Fatalf("managers %v, want only lifecycle-manager", got)
	}
}
