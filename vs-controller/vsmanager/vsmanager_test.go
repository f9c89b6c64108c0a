package vsmanager

// The manager's assembly over a fake cluster (test/fakecluster and
// controller-runtime's informertest cache): what New gives the manager.
// vs-controller/integration starts the very same manager against real API
// servers.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache/informertest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// fakeManagers makes New build its managers over a fake cluster.
func fakeManagers(t *testing.T) *fakecluster.Managers {
	t.Helper()
	s := Scheme()
	fakecluster.AddKyma(s)
	m := &fakecluster.Managers{Cluster: fakecluster.New(t, s), Synced: true}
	newManager = m.New
	t.Cleanup(func() { newManager = ctrl.NewManager })
	return m
}

func byObject(t *testing.T, co cache.Options, obj client.Object) cache.ByObject {
	t.Helper()
	for o, by := range co.ByObject {
		if reflect.TypeOf(o) == reflect.TypeOf(obj) && o.GetObjectKind().GroupVersionKind() == obj.GetObjectKind().GroupVersionKind() {
			return by
		}
	}
	t.Fatalf("no cache restriction for %T", obj)
	return cache.ByObject{}
}

// TestNewManager: the manager caches only what vs-controller may read —
// Gateways in the gateway namespace, Kymas, Certificates and Roles in the
// Kyma namespace, and of the Secrets there only those labelled
// part-of=runtime-watcher (least privilege, docs/security.md) — and the
// namespaces and leader election default as documented.
func TestNewManager(t *testing.T) {
	b := fakeManagers(t)
	mgr, err := New(context.Background(), &rest.Config{Host: "https://kcp.invalid"}, Options{Issuer: cmmeta.IssuerReference{Name: "ca"}, LeaderElection: false})
	if err != nil {
		t.Fatal(err)
	}
	if mgr == nil {
		t.Fatal("no manager")
	}
	if b.Options.LeaderElectionNamespace != runtimes.DefaultKymaNamespace || b.Options.LeaderElectionID != "vs-controller.operator.kyma-project.io" {
		t.Errorf("leader election %q in %q", b.Options.LeaderElectionID, b.Options.LeaderElectionNamespace)
	}
	secrets := byObject(t, b.Cache, &corev1.Secret{})
	if _, ok := secrets.Namespaces[runtimes.DefaultKymaNamespace]; !ok || len(secrets.Namespaces) != 1 {
		t.Errorf("Secrets cached in %v, want the Kyma namespace only", secrets.Namespaces)
	}
	ours := labels.Set{contract.LabelPartOf: contract.PartOf}
	if secrets.Label == nil || !secrets.Label.Matches(ours) || secrets.Label.Matches(labels.Set{}) {
		t.Errorf("Secrets cached by %v, want part-of=runtime-watcher only", secrets.Label)
	}
	gws := byObject(t, b.Cache, &istionetworkingv1.Gateway{})
	if _, ok := gws.Namespaces["istio-system"]; !ok || len(gws.Namespaces) != 1 {
		t.Errorf("Gateways cached in %v, want istio-system", gws.Namespaces)
	}
	kymas := byObject(t, b.Cache, runtimes.NewKyma())
	if _, ok := kymas.Namespaces[runtimes.DefaultKymaNamespace]; !ok || len(kymas.Namespaces) != 1 {
		t.Errorf("Kymas cached in %v", kymas.Namespaces)
	}

	// Other namespaces, a trust keeper.
	b = fakeManagers(t)
	if _, err := New(context.Background(), &rest.Config{Host: "https://kcp.invalid"}, Options{Issuer: cmmeta.IssuerReference{Name: "ca"},
		GatewayNamespace: "gw", KymaNamespace: "kymas", LeaderElectionNamespace: "le", SkipNameValidation: true,
		Trust: trust.Options{CASecret: client.ObjectKey{Namespace: "istio-system", Name: "ca"}}}); err != nil {
		t.Fatal(err)
	}
	if _, ok := byObject(t, b.Cache, &istionetworkingv1.Gateway{}).Namespaces["gw"]; !ok || b.Options.LeaderElectionNamespace != "le" {
		t.Errorf("gateway namespace %v, leader election in %q", byObject(t, b.Cache, &istionetworkingv1.Gateway{}).Namespaces, b.Options.LeaderElectionNamespace)
	}
	if _, ok := byObject(t, b.Cache, &corev1.Secret{}).Namespaces["kymas"]; !ok {
		t.Error("Secrets not cached in the Kyma namespace kymas")
	}
}

// TestNewRefuses: without an issuer there is no manager.
func TestNewRefuses(t *testing.T) {
	b := fakeManagers(t)
	if _, err := New(context.Background(), &rest.Config{}, Options{}); err == nil || !strings.Contains(err.Error(), "issuer") {
		t.Errorf("no issuer: %v", err)
	}
	if b.Options.Scheme != nil { // New was not called
		t.Error("a manager was built without an issuer")
	}
	if _, err := New(context.Background(), &rest.Config{}, Options{Issuer: cmmeta.IssuerReference{Name: "ca"}, SkipNameValidation: true,
		Trust: trust.Options{MigrationExtraCASecret: client.ObjectKey{Name: "x"}}}); err == nil {
		t.Error("an inconsistent trust configuration was accepted")
	}
}

// TestCacheSynced: ready only once the informers have synced.
func TestCacheSynced(t *testing.T) {
	synced := false
	check := cacheSynced(&informertest.FakeInformers{Synced: &synced})
	req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
	if err := check(req); err == nil {
		t.Error("not synced: ready")
	}
	synced = true
	if err := check(req); err != nil {
		t.Errorf("synced: %v", err)
	}
}
