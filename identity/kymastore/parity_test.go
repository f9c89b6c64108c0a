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
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestParityWithKymaLookup runs the Store (fed by its reflector) and
// identity.NewKymaLookup (over identity.NewKymaCache) against the same real
// API server and requires the same answer for every runtime ID, also after
// the Kyma CRs changed (watch events).
func TestParityWithKymaLookup(t *testing.T) {
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := env.Stop(); err != nil {
			t.Error(err)
		}
	})
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
	// More than one page (500) of the initial list.
	for i := range 1100 {
		kymas = append(kymas, extauthz.Kyma(ns, fmt.Sprintf("bulk-%04d", i), fmt.Sprintf("bulk-%04d.example.com", i),
			map[string]string{"operator.kyma-project.io/managed-by": "lifecycle-manager"}))
	}
	if err := createAll(ctx, kcp.Client, kymas); err != nil {
		t.Fatal(err)
	}

	c, err := identity.NewKymaCache(ctx, kcp.Config, ns)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("cache did not sync")
	}
	ref := identity.NewKymaLookup(c, ns)

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
	if n := store.Len(); n != len(kymas)-2 {
		t.Errorf("store holds %d Kyma CRs, want %d", n, len(kymas)-2)
	}

	ids := []string{"runtime-1", "runtime-2", "kyma-abc", "kyma-dup-1", "runtime-dup", "runtime-nodomain", "runtime-emptylabel",
		"runtime-3", "kyma-def", "runtime-4", "runtime-5", "runtime-6", "kyma-six", "runtime-unknown", "Runtime_1",
		string(make([]byte, 300)), "", "bulk-0000", "bulk-0499", "bulk-0500", "bulk-1099"}
	// agree compares both lookups on every ID once.
	agree := func() error {
		for _, id := range ids {
			wantRT, wantFound, wantErr := ref.LookupRuntime(ctx, id)
			rt, found, err := store.LookupRuntime(ctx, id)
			if rt != wantRT || found != wantFound || (err != nil) != (wantErr != nil) {
				return fmt.Errorf("LookupRuntime(%q): store %+v, %v, %v; NewKymaLookup %+v, %v, %v", id, rt, found, err, wantRT, wantFound, wantErr)
			}
		}
		return nil
	}
	if err := agree(); err != nil {
		t.Fatal(err)
	}
	if rt, found, err := store.LookupRuntime(ctx, "runtime-2"); err != nil || !found || rt.KymaName != "kyma-abc" {
		t.Fatalf("runtime-2: %+v %v %v", rt, found, err) // the table is not vacuous
	}

	// Changes through the watch: a label moved, a domain changed, a Kyma deleted.
	move := extauthz.Kyma(ns, "kyma-dup-2", "b.example.com", map[string]string{contract.LabelRuntimeID: "runtime-7"})
	if err := kcp.Client.Patch(ctx, move, client.Merge); err != nil {
		t.Fatal(err)
	}
	dom := extauthz.Kyma(ns, "runtime-1", "new1.example.com", nil)
	if err := kcp.Client.Patch(ctx, dom, client.Merge); err != nil {
		t.Fatal(err)
	}
	if err := kcp.Client.Delete(ctx, extauthz.Kyma(ns, "kyma-six", "", nil)); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, "runtime-7")
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		if rt, _, _ := store.LookupRuntime(ctx, "runtime-1"); rt.SKRDomain != "new1.example.com" {
			return fmt.Errorf("runtime-1 still %+v", rt)
		}
		if rt, _, _ := store.LookupRuntime(ctx, "runtime-7"); rt.KymaName != "kyma-dup-2" {
			return fmt.Errorf("runtime-7 still %+v", rt)
		}
		if rt, _, _ := store.LookupRuntime(ctx, "runtime-6"); rt.KymaName != "runtime-6" {
			return fmt.Errorf("runtime-6 still %+v", rt)
		}
		return agree()
	}).WithTimeout(30 * time.Second).Should(gomega.Succeed())
}

// TestKymaResourceWithoutCRD: without the Kyma CRD, discovery fails, so
// ext-authz fails at start instead of never becoming ready.
func TestKymaResourceWithoutCRD(t *testing.T) {
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
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
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
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

// BenchmarkLookupPerCheck compares the cost of one Kyma lookup (once per
// Check) through identity.NewKymaLookup over the controller-runtime cache
// (indexed List by label, then Get by name) with the Store's, for a
// labelled and an unlabelled Kyma among 1,000.
func BenchmarkLookupPerCheck(b *testing.B) {
	env, err := testenv.Start("kcp")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = env.Stop() })
	kcp := env.Cluster("kcp")
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	const ns = "kcp-system"
	if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		b.Fatal(err)
	}
	var kymas []client.Object
	for i := range 1000 {
		kymas = append(kymas, extauthz.Kyma(ns, fmt.Sprintf("runtime-%04d", i), "d.example.com", nil))
	}
	kymas = append(kymas, extauthz.Kyma(ns, "kyma-l", "l.example.com", map[string]string{contract.LabelRuntimeID: "runtime-l"}))
	if err := createAll(ctx, kcp.Client, kymas); err != nil {
		b.Fatal(err)
	}
	c, err := identity.NewKymaCache(ctx, kcp.Config, ns)
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = c.Start(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		b.Fatal("cache did not sync")
	}
	gvr, err := kymastore.KymaResource(ctx, kcp.Config)
	if err != nil {
		b.Fatal(err)
	}
	store := kymastore.New()
	go func() { _ = store.Run(ctx, kcp.Config, gvr, ns) }()
	<-store.Synced()
	for _, l := range []struct {
		name   string
		lookup interface {
			LookupRuntime(context.Context, string) (identity.Runtime, bool, error)
		}
	}{{"NewKymaLookup", identity.NewKymaLookup(c, ns)}, {"Store", store}} {
		for _, id := range []string{"runtime-0042", "runtime-l"} {
			b.Run(l.name+"/"+id, func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					if _, ok, err := l.lookup.LookupRuntime(ctx, id); !ok || err != nil {
						b.Fatal(ok, err)
					}
				}
			})
		}
	}
}
