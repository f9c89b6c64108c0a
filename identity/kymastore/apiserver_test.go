package kymastore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestStoreOnAPIServer runs the Store, fed by its reflector, against a real
// API server, as ext-authz runs it: the initial list spans more than one
// page, only the namespace's Kyma CRs are held, the lookup answers by the
// documented precedence (label before name, an empty label is no label),
// and watch events (a label moved, a domain changed, a Kyma deleted) reach
// it.
func TestStoreOnAPIServer(t *testing.T) {
	env := testenv.StartForTest(t, "kcp")
	kcp := env.Cluster("kcp")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns, other = "kcp-system", "elsewhere"
	for _, n := range []string{ns, other} {
		if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	kymas := []client.Object{
		extauthz.Kyma(ns, "runtime-1", "skr1.example.com", nil),
		extauthz.Kyma(ns, "kyma-abc", "skr2.example.com", map[string]string{contract.LabelRuntimeID: "runtime-2", "team": "x"}),
		extauthz.Kyma(ns, "kyma-dup-1", "a.example.com", map[string]string{contract.LabelRuntimeID: "runtime-dup"}),
		extauthz.Kyma(ns, "kyma-dup-2", "b.example.com", map[string]string{contract.LabelRuntimeID: "runtime-dup"}),
		extauthz.Kyma(ns, "runtime-nodomain", "", nil),
		extauthz.Kyma(ns, "runtime-emptylabel", "e.example.com", map[string]string{contract.LabelRuntimeID: ""}),
		extauthz.Kyma(other, "runtime-3", "skr3.example.com", nil),
		extauthz.Kyma(other, "kyma-def", "skr3.example.com", map[string]string{contract.LabelRuntimeID: "runtime-3"}),
		extauthz.Kyma(ns, "runtime-4", "skr5.example.com", map[string]string{contract.LabelRuntimeID: "runtime-5"}),
		extauthz.Kyma(ns, "runtime-6", "named6.example.com", nil),
		extauthz.Kyma(ns, "kyma-six", "skr6.example.com", map[string]string{contract.LabelRuntimeID: "runtime-6"}),
	}
	big := extauthz.Kyma(ns, "runtime-big", "big.example.com", nil)
	big.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "big.example.com", "kubectl.kubernetes.io/last-applied-configuration": "{...}"})
	kymas = append(kymas, big)
	// More than two pages (500) of the initial list.
	const bulk = 1100
	for i := range bulk {
		kymas = append(kymas, extauthz.Kyma(ns, fmt.Sprintf("bulk-%04d", i), fmt.Sprintf("bulk-%04d.example.com", i),
			map[string]string{"operator.kyma-project.io/managed-by": "lifecycle-manager"}))
	}
	if err := createAll(ctx, kcp.Client, kymas); err != nil {
		t.Fatal(err)
	}

	gvr, err := kymastore.KymaResource(ctx, kcp.Config)
	if err != nil {
		t.Fatal(err)
	}
	store := kymastore.New()
	go func() { _ = store.Run(ctx, kcp.Config, gvr, ns) }()
	select {
	case <-store.Synced():
	case <-ctx.Done():
		t.Fatal("store did not sync")
	}
	if n, want := store.Len(), len(kymas)-2; n != want {
		t.Errorf("store holds %d Kyma CRs, want %d (those of %s)", n, want, ns)
	}

	rt := func(id, kyma, domain string) pinning.Runtime {
		return pinning.Runtime{ID: id, KymaName: kyma, SKRDomain: domain}
	}
	for _, tt := range []struct {
		id      string
		want    pinning.Runtime // zero: not found
		wantErr bool
	}{
		{id: "runtime-1", want: rt("runtime-1", "runtime-1", "skr1.example.com")},
		{id: "runtime-2", want: rt("runtime-2", "kyma-abc", "skr2.example.com")},
		{id: "kyma-abc"}, // its label names runtime-2
		{id: "runtime-nodomain", want: rt("runtime-nodomain", "runtime-nodomain", "")},
		{id: "runtime-emptylabel", want: rt("runtime-emptylabel", "runtime-emptylabel", "e.example.com")}, // an empty label is no label
		{id: ""},
		{id: "runtime-4"}, // named so, but labelled runtime-5
		{id: "runtime-5", want: rt("runtime-5", "runtime-4", "skr5.example.com")},
		{id: "runtime-6", want: rt("runtime-6", "kyma-six", "skr6.example.com")}, // label before name
		{id: "runtime-3"},                  // only in another namespace
		{id: "kyma-def"},                   // only in another namespace
		{id: "runtime-unknown"},            // nowhere
		{id: "Runtime_1"},                  // neither a name nor a label value of any Kyma
		{id: "runtime-dup", wantErr: true}, // ambiguous label: fail closed
		{id: string(make([]byte, 300))},    // not a valid name or label value
		{id: "runtime-big", want: rt("runtime-big", "runtime-big", "big.example.com")},
		{id: "bulk-0000", want: rt("bulk-0000", "bulk-0000", "bulk-0000.example.com")},
		{id: "bulk-0499", want: rt("bulk-0499", "bulk-0499", "bulk-0499.example.com")},
		{id: "bulk-0500", want: rt("bulk-0500", "bulk-0500", "bulk-0500.example.com")},
		{id: "bulk-1099", want: rt("bulk-1099", "bulk-1099", "bulk-1099.example.com")},
	} {
		got, found, err := store.LookupRuntime(ctx, tt.id)
		if (err != nil) != tt.wantErr || found != (tt.want != pinning.Runtime{}) || got != tt.want {
			t.Errorf("LookupRuntime(%q) = %+v, %v, %v; want %+v, err=%v", tt.id, got, found, err, tt.want, tt.wantErr)
		}
	}

	// Changes through the watch: a label moved, a domain changed, a Kyma deleted.
	if err := kcp.Client.Patch(ctx, extauthz.Kyma(ns, "kyma-dup-2", "b.example.com", map[string]string{contract.LabelRuntimeID: "runtime-7"}), client.Merge); err != nil {
		t.Fatal(err)
	}
	if err := kcp.Client.Patch(ctx, extauthz.Kyma(ns, "runtime-1", "new1.example.com", nil), client.Merge); err != nil {
		t.Fatal(err)
	}
	if err := kcp.Client.Delete(ctx, extauthz.Kyma(ns, "kyma-six", "", nil)); err != nil {
		t.Fatal(err)
	}
	want := map[string]pinning.Runtime{
		"runtime-1":   rt("runtime-1", "runtime-1", "new1.example.com"),
		"runtime-7":   rt("runtime-7", "kyma-dup-2", "b.example.com"),
		"runtime-dup": rt("runtime-dup", "kyma-dup-1", "a.example.com"), // no longer ambiguous
		"runtime-6":   rt("runtime-6", "runtime-6", "named6.example.com"),
	}
	gomega.NewWithT(t).Eventually(func() error {
		for id, w := range want {
			if got, found, err := store.LookupRuntime(ctx, id); !found || err != nil || got != w {
				return fmt.Errorf("LookupRuntime(%q) = %+v, %v, %v; want %+v", id, got, found, err, w)
			}
		}
		return nil
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

// TestKymaResourceWithoutCRD: without the Kyma CRD, discovery fails, so
// ext-authz fails at start instead of never becoming ready.
func TestKymaResourceWithoutCRD(t *testing.T) {
	env := testenv.StartForTest(t, "kcp")
	kcp := env.Cluster("kcp")
	ctx := context.Background()
	if v, err := kymastore.ServerVersion(ctx, kcp.Config); err != nil || v == "" {
		t.Fatalf("ServerVersion = %q, %v", v, err)
	}
	if gvr, err := kymastore.KymaResource(ctx, kcp.Config); err != nil || gvr.Resource != "kymas" {
		t.Fatalf("KymaResource = %v, %v", gvr, err)
	}
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "kymas.operator.kyma-project.io"}}
	if err := kcp.Client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	gomega.NewWithT(t).Eventually(func() error {
		_, err := kymastore.KymaResource(ctx, kcp.Config)
		return err
	}).WithTimeout(30 * time.Second).Should(gomega.MatchError(gomega.ContainSubstring("Kyma CRD")))
}

// createAll creates objects with a bounded pool of workers.
func createAll(ctx context.Context, c client.Client, objs []client.Object) error {
	var (
		wg    sync.WaitGroup
		next  atomic.Int64
		mu    sync.Mutex
		first error
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= len(objs) {
					return
				}
				if err := c.Create(ctx, objs[i]); err != nil {
					mu.Lock()
					first = err
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}
