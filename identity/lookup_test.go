package identity_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestKymaLookup runs NewKymaLookup over a real metadata-only cache of a real
// API server, set up as ext-authz sets it up.
func TestKymaLookup(t *testing.T) {
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
		extauthz.Kyma(other, "runtime-3", "skr3.example.com", nil),
		extauthz.Kyma(other, "kyma-def", "skr3.example.com", map[string]string{contract.LabelRuntimeID: "runtime-3"}),
		extauthz.Kyma(ns, "runtime-4", "skr5.example.com", map[string]string{contract.LabelRuntimeID: "runtime-5"}),
		extauthz.Kyma(ns, "runtime-6", "named6.example.com", nil),
		extauthz.Kyma(ns, "kyma-six", "skr6.example.com", map[string]string{contract.LabelRuntimeID: "runtime-6"}),
	}
	withExtra := extauthz.Kyma(ns, "runtime-big", "big.example.com", nil)
	withExtra.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "big.example.com", "kubectl.kubernetes.io/last-applied-configuration": "{...}"})
	kymas = append(kymas, withExtra)
	// More than one page (500) of the informer's initial list.
	for i := range 1200 {
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
	lookup := identity.NewKymaLookup(c, ns)

	tests := []struct {
		id      string
		want    identity.Runtime
		found   bool
		wantErr bool
	}{
		{id: "runtime-1", want: identity.Runtime{ID: "runtime-1", KymaName: "runtime-1", SKRDomain: "skr1.example.com"}, found: true},
		{id: "runtime-2", want: identity.Runtime{ID: "runtime-2", KymaName: "kyma-abc", SKRDomain: "skr2.example.com"}, found: true},
		{id: "kyma-abc"}, // its label names runtime-2
		{id: "runtime-nodomain", want: identity.Runtime{ID: "runtime-nodomain", KymaName: "runtime-nodomain"}, found: true},
		{id: "runtime-4"}, // named so, but labelled runtime-5
		{id: "runtime-5", want: identity.Runtime{ID: "runtime-5", KymaName: "runtime-4", SKRDomain: "skr5.example.com"}, found: true},
		{id: "runtime-6", want: identity.Runtime{ID: "runtime-6", KymaName: "kyma-six", SKRDomain: "skr6.example.com"}, found: true}, // label before name
		{id: "runtime-3"},                  // only in another namespace
		{id: "kyma-def"},                   // only in another namespace
		{id: "runtime-unknown"},            // nowhere
		{id: "Runtime_1"},                  // neither a name nor a label value of any Kyma
		{id: "runtime-dup", wantErr: true}, // ambiguous label: fail closed
		{id: string(make([]byte, 300))},    // not a valid name or label value
		{id: "runtime-big", want: identity.Runtime{ID: "runtime-big", KymaName: "runtime-big", SKRDomain: "big.example.com"}, found: true},
	}
	for _, tt := range tests {
		rt, found, err := lookup.LookupRuntime(ctx, tt.id)
		if (err != nil) != tt.wantErr || found != tt.found || rt != tt.want {
			t.Errorf("LookupRuntime(%q) = %+v, %v, %v; want %+v, %v, err=%v", tt.id, rt, found, err, tt.want, tt.found, tt.wantErr)
		}
	}

	for _, i := range []int{0, 499, 500, 1199} {
		id := fmt.Sprintf("bulk-%04d", i)
		if rt, found, err := lookup.LookupRuntime(ctx, id); err != nil || !found || rt.SKRDomain != id+".example.com" {
			t.Errorf("LookupRuntime(%q) = %+v, %v, %v", id, rt, found, err)
		}
	}
	all := identity.NewKymaList()
	if err := c.List(ctx, all, client.InNamespace(ns)); err != nil || len(all.Items) != 1209 {
		t.Errorf("cache lists %d Kyma CRs (%v), want 1209", len(all.Items), err)
	}
	// Only Kyma CRs are cached; reading anything else fails instead of
	// starting another informer.
	if err := c.Get(ctx, client.ObjectKey{Name: ns}, &corev1.Namespace{}); err == nil {
		t.Error("the cache answered a Namespace read")
	}

	// The cache holds only what pinning reads.
	k := identity.NewKyma()
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "kyma-abc"}, k); err != nil {
		t.Fatal(err)
	}
	if len(k.Labels) != 1 || len(k.Annotations) != 1 || len(k.ManagedFields) != 0 {
		t.Errorf("cached Kyma not trimmed: labels %v, annotations %v, %d managedFields", k.Labels, k.Annotations, len(k.ManagedFields))
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "runtime-big"}, k); err != nil {
		t.Fatal(err)
	}
	if _, ok := k.Annotations["kubectl.kubernetes.io/last-applied-configuration"]; ok {
		t.Error("cached Kyma keeps last-applied-configuration")
	}
}

func TestTrimKymaPassesOtherObjects(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: map[string]string{"a": "b"}}}
	got, err := identity.TrimKyma(pod)
	if err != nil || got != pod {
		t.Fatalf("TrimKyma(pod) = %v, %v", got, err)
	}
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

// TestNewKymaCacheWithoutCRD: without the Kyma CRD the cache is not made,
// so ext-authz fails at start instead of never becoming ready.
func TestNewKymaCacheWithoutCRD(t *testing.T) {
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
	ctx := context.Background()
	crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: "kymas.operator.kyma-project.io"}}
	if err := kcp.Client.Delete(ctx, crd); err != nil {
		t.Fatal(err)
	}
	g := gomega.NewWithT(t)
	g.Eventually(func() error {
		_, err := identity.NewKymaCache(ctx, kcp.Config, "kcp-system")
		return err
	}).WithTimeout(30 * time.Second).Should(gomega.MatchError(gomega.ContainSubstring("Kyma CRD")))
}
