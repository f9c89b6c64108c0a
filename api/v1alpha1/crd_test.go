package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func raw(s string) k8sruntime.RawExtension { return k8sruntime.RawExtension{Raw: []byte(s)} }

func configMapItem(name string) v1alpha1.SyncItem {
	return v1alpha1.SyncItem{
		Name:     name,
		Strategy: v1alpha1.CreateAndSync,
		Resource: raw(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"` + name + `","namespace":"default"},"data":{"a":"b"}}`),
	}
}

func validSyncResource(name string, items ...v1alpha1.SyncItem) *v1alpha1.SyncResource {
	return &v1alpha1.SyncResource{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec:       v1alpha1.SyncResourceSpec{Kyma: "kyma-1", Items: items},
	}
}

// TestCRDs checks the generated CRDs on a real API server.
func TestCRDs(t *testing.T) {
	env := testenv.StartForTest(t, "kcp")
	scheme := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
	utilruntime.Must(v1alpha1.AddToScheme(scheme))
	c, err := client.New(env.Cluster("kcp").Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	t.Run("a valid ModuleConfig is accepted, its resource kept whole, its status a subresource", func(t *testing.T) {
		mc := &v1alpha1.ModuleConfig{
			ObjectMeta: metav1.ObjectMeta{Name: "kyma-1-serverless", Namespace: "default"},
			Spec: v1alpha1.ModuleConfigSpec{Kyma: "kyma-1", Module: "serverless", Resource: raw(
				`{"apiVersion":"operator.kyma-project.io/v1alpha1","kind":"Serverless","metadata":{"name":"default","namespace":"kyma-system","generation":3,"labels":{"a":"b"}},"spec":{"dockerRegistry":{"enableInternal":true},"anything":[1,2]}}`)},
		}
		if err := c.Create(ctx, mc); err != nil {
			t.Fatal(err)
		}
		mc.Status.State = v1alpha1.StateReady
		mc.Status.ObservedGeneration = mc.Generation
		mc.Status.LastOperation = &v1alpha1.LastOperation{Operation: "mirrored", LastUpdateTime: metav1.Now()}
		if err := c.Status().Update(ctx, mc); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.ModuleConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mc), got); err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{`"anything":[1,2]`, `"generation":3`, `"enableInternal":true`, `"labels":{"a":"b"}`} {
			if !strings.Contains(string(got.Spec.Resource.Raw), want) {
				t.Errorf("resource lost %s: %s", want, got.Spec.Resource.Raw)
			}
		}
		if got.Status.State != v1alpha1.StateReady || got.Status.LastOperation == nil {
			t.Errorf("status not written: %+v", got.Status)
		}
		got.Status.State = v1alpha1.StateError
		got.Spec.Module = "other"
		if err := c.Update(ctx, got); err != nil {
			t.Fatal(err)
		}
		again := &v1alpha1.ModuleConfig{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(mc), again); err != nil {
			t.Fatal(err)
		}
		if again.Status.State != v1alpha1.StateReady || again.Spec.Module != "other" {
			t.Errorf("status changed by a plain update or spec not: %+v", again)
		}
	})

	t.Run("a valid SyncResource with every strategy and a subresource is accepted", func(t *testing.T) {
		ignore := configMapItem("ignored")
		ignore.Strategy = v1alpha1.CreateAndIgnore
		del := configMapItem("deleted.one")
		del.Strategy = v1alpha1.Delete
		withStatus := v1alpha1.SyncItem{
			Name: "with-status", Strategy: v1alpha1.CreateAndSync,
			Resource:    raw(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":"k","namespace":"default"},"spec":{"channel":"regular"}}`),
			Subresource: &k8sruntime.RawExtension{Raw: []byte(`{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":"k"},"status":{"state":"Ready"}}`)},
		}
		sr := validSyncResource("valid", configMapItem("synced"), ignore, del, withStatus)
		if err := c.Create(ctx, sr); err != nil {
			t.Fatal(err)
		}
		sr.Status.State = v1alpha1.StateWarning
		sr.Status.Items = []v1alpha1.ItemStatus{
			{Name: "synced", State: v1alpha1.ItemReady, Object: &v1alpha1.ObjectReference{APIVersion: "v1", Kind: "ConfigMap", Namespace: "default", Name: "synced"}},
			{Name: "secret", State: v1alpha1.ItemRefused, Message: "Secrets are not synced"},
		}
		if err := c.Status().Update(ctx, sr); err != nil {
			t.Fatal(err)
		}
		got := &v1alpha1.SyncResource{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(sr), got); err != nil {
			t.Fatal(err)
		}
		if len(got.Spec.Items) != 4 || got.Spec.Items[3].Subresource == nil || len(got.Status.Items) != 2 {
			t.Errorf("SyncResource not stored whole: %+v", got)
		}
	})

	rejected := []struct {
		name string
		sr   *v1alpha1.SyncResource
		want string
	}{
		{"an unknown strategy", func() *v1alpha1.SyncResource {
			i := configMapItem("a")
			i.Strategy = "Replace"
			return validSyncResource("bad-strategy", i)
		}(), "Unsupported value"},
		{"duplicate item names", validSyncResource("duplicate", configMapItem("a"), configMapItem("a")), "Duplicate value"},
		{"an item name that is not DNS-like", validSyncResource("bad-name", configMapItem("Not_DNS")), "should match"},
		{"an item without resource kind", validSyncResource("no-kind", v1alpha1.SyncItem{Name: "a", Strategy: v1alpha1.Delete,
			Resource: raw(`{"apiVersion":"v1","metadata":{"name":"x"}}`)}), "kind"},
		{"no kyma", func() *v1alpha1.SyncResource { sr := validSyncResource("no-kyma"); sr.Spec.Kyma = ""; return sr }(), "spec.kyma"},
	}
	for _, tc := range rejected {
		t.Run("a SyncResource with "+tc.name+" is rejected", func(t *testing.T) {
			err := c.Create(ctx, tc.sr)
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not say %q", err, tc.want)
			}
		})
	}

	t.Run("the CRDs have the printer columns", func(t *testing.T) {
		for crd, want := range map[string][]string{
			"moduleconfigs.operator.kyma-project.io": {"Kyma", "Module", "State", "Age"},
			"syncresources.operator.kyma-project.io": {"Kyma", "State", "Replica", "Age"},
		} {
			got := &apiextensionsv1.CustomResourceDefinition{}
			if err := c.Get(ctx, client.ObjectKey{Name: crd}, got); err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, col := range got.Spec.Versions[0].AdditionalPrinterColumns {
				names = append(names, col.Name)
			}
			if strings.Join(names, ",") != strings.Join(want, ",") {
				t.Errorf("%s: printer columns %v, want %v", crd, names, want)
			}
			if got.Spec.Scope != apiextensionsv1.NamespaceScoped || got.Spec.Versions[0].Subresources == nil {
				t.Errorf("%s: not namespaced or no status subresource", crd)
			}
		}
	})
}
