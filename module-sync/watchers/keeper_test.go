package watchers

// The fake-cluster tier of the Watcher keeper (test/fakecluster).

import (
	"context"
	"errors"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

// TestKeeper: a pass creates the configured Watchers, repairs a changed
// spec or label, deletes module-sync's Watchers of resources no longer
// configured and leaves other Watchers alone; a pass with nothing to do
// writes nothing; failures are the pass's error.
func TestKeeper(t *testing.T) {
	ctx := context.Background()
	s := k8sruntime.NewScheme()
	utilruntime.Must(v1beta2.AddToScheme(s))
	serverless := mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "serverlesses"}, Module: "serverless"}
	keda := mirror.ModuleResource{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "kedas"}, Module: "keda"}
	cfg := Config{KymaNamespace: "kcp-system", Manager: "module-sync", Service: v1beta2.Service{Name: "module-sync", Namespace: "kcp-system", Port: 8082},
		ModuleResources: []mirror.ModuleResource{serverless, keda}}
	stale := Desired(Config{KymaNamespace: "kcp-system", Manager: "module-sync", ModuleResources: []mirror.ModuleResource{{GroupVersionResource: schema.GroupVersionResource{Resource: "gone"}}}})[0]
	foreign := &v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Namespace: "kcp-system", Name: "lifecycle-manager", Labels: map[string]string{contract.LabelManagedBy: "module-sync"}}}
	c := fakecluster.New(t, s, fakecluster.WithObjects(stale, foreign))
	k := &Keeper{Client: c, Config: cfg}
	pass := func() error { return k.ensure(ctx) }
	// Start makes a pass at once (then one per CheckInterval until ctx
	// ends; it has ended here).
	done, cancel := context.WithCancel(ctx)
	cancel()
	if err := k.Start(done); err != nil {
		t.Fatal(err)
	}
	if !k.NeedLeaderElection() {
		t.Error("the keeper runs on every replica")
	}
	for _, d := range Desired(cfg) {
		w := &v1beta2.Watcher{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(d), w); err != nil {
			t.Fatalf("Watcher %s: %v", d.Name, err)
		}
		if w.Spec.ResourceToWatch.Resource == "" || w.Spec.Manager != "module-sync" {
			t.Errorf("Watcher %s: %+v", d.Name, w.Spec)
		}
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(stale), &v1beta2.Watcher{}); !apierrors.IsNotFound(err) {
		t.Errorf("the Watcher of a resource no longer configured: %v, want deleted", err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(foreign), &v1beta2.Watcher{}); err != nil {
		t.Errorf("a Watcher not named module-sync-…: %v, want kept", err)
	}

	end := c.ExpectNoWrites(t)
	if err := pass(); err != nil {
		t.Errorf("nothing to do: %v", err)
	}
	end()
	w := &v1beta2.Watcher{}
	if err := c.Get(ctx, client.ObjectKeyFromObject(Desired(cfg)[0]), w); err != nil {
		t.Fatal(err)
	}
	w.Spec.ServiceInfo.Port = 1
	w.Labels = nil
	if err := c.Update(ctx, w); err != nil {
		t.Fatal(err)
	}
	if err := pass(); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(w), w); err != nil || w.Spec.ServiceInfo.Port != 8082 || w.Labels[contract.LabelManagedBy] != "module-sync" {
		t.Errorf("repaired: %v, %+v %v", err, w.Spec.ServiceInfo, w.Labels)
	}

	for _, f := range []struct{ verb, want string }{
		{fakecluster.Update, "update Watcher"}, {fakecluster.Create, "create Watcher"}, {fakecluster.Delete, "delete Watcher"}, {fakecluster.List, "connection refused"}, {fakecluster.Get, "connection refused"},
	} {
		switch f.verb {
		case fakecluster.Update:
			w.Spec.ServiceInfo.Port = 2
			if err := c.Update(ctx, w); err != nil {
				t.Fatal(err)
			}
		case fakecluster.Create:
			if err := c.Delete(ctx, w); err != nil {
				t.Fatal(err)
			}
		case fakecluster.Delete:
			again := stale.DeepCopy()
			again.ResourceVersion = ""
			if err := c.Create(ctx, again); err != nil {
				t.Fatal(err)
			}
		}
		c.Fail(f.verb, "Watcher", "", fakecluster.ErrUnreachable, 1)
		if err := pass(); err == nil || !strings.Contains(err.Error(), f.want) || !errors.Is(err, fakecluster.ErrUnreachable) {
			t.Errorf("%s refused: %v", f.verb, err)
		}
		if err := pass(); err != nil {
			t.Errorf("after %s was refused: %v", f.verb, err)
		}
		if err := c.Get(ctx, client.ObjectKeyFromObject(Desired(cfg)[0]), w); err != nil {
			t.Fatal(err)
		}
	}
}
