package runtimes

import (
	"testing"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
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
	s, err := shards.New(shards.Options{Leases: fake.NewClientset().CoordinationV1(), Namespace: kymaNS, Group: "vs-controller", Identity: "vs-0"})
	if err != nil {
		t.Fatal(err)
	}
	return s
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
