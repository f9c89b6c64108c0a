package e2e_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// Module resource sync (docs/architecture.md §4.11): a Module CR edit in the SKR
// travels SKR → module-sync (watcher event) → ModuleConfig in the KCP → the
// example module manager's SyncResource → module-sync → the object in the
// SKR. "Within seconds" is 10 s here.
var _ = Describe("module sync", Label("module-sync"), Ordered, func() {
	const within = 10 * time.Second
	var ms e2e.ModuleSyncEnvironment
	mcKey := localenv.SampleModuleConfig()
	skrObj := func(name string) client.ObjectKey {
		return client.ObjectKey{Namespace: localenv.SKRNamespace, Name: name}
	}

	BeforeAll(func(ctx SpecContext) {
		var ok bool
		if ms, ok = env.(e2e.ModuleSyncEnvironment); !ok {
			Fail("the " + envName() + " environment does not deploy module-sync and the example module manager: leave out the module-sync label there (test/kind/e2e.sh does)")
		}
		// As pathReady for the sample Watcher: another container may have
		// broken the path on purpose and left it being rebuilt. Edit the
		// Module CR until an edit reaches its ModuleConfig.
		round := 0
		Eventually(func(g Gomega) {
			round++
			greeting := fmt.Sprintf("path-probe-%d", round)
			g.Expect(ms.SetSample(ctx, greeting, 1)).To(Succeed())
			g.Eventually(func(g Gomega) {
				mc := &v1alpha1.ModuleConfig{}
				g.Expect(env.KCP().Get(ctx, mcKey, mc)).To(Succeed())
				g.Expect(string(mc.Spec.Resource.Raw)).To(ContainSubstring(greeting))
			}).WithTimeout(5 * time.Second).Should(Succeed())
		}).WithTimeout(2*time.Minute).Should(Succeed(), "no Module CR edit reached the ModuleConfig")
	})

	configGreeting := func(ctx context.Context) string {
		cm := &corev1.ConfigMap{}
		if err := env.SKR().Get(ctx, skrObj(localenv.SampleConfigMap), cm); err != nil {
			return "<" + err.Error() + ">"
		}
		return cm.Data["greeting"]
	}

	It("carries a Module CR edit to the ModuleConfig, the SyncResource and the SKR within seconds", func(ctx SpecContext) {
		began := time.Now()
		Expect(ms.SetSample(ctx, "e2e-1", 2)).To(Succeed())
		Eventually(func(g Gomega) {
			mc := &v1alpha1.ModuleConfig{}
			g.Expect(env.KCP().Get(ctx, mcKey, mc)).To(Succeed())
			u := &unstructured.Unstructured{}
			g.Expect(u.UnmarshalJSON(mc.Spec.Resource.Raw)).To(Succeed())
			g.Expect(u.Object["spec"]).To(HaveKeyWithValue("greeting", "e2e-1"))
			g.Expect(mc.Spec.Kyma).To(Equal(localenv.RuntimeID))
			g.Expect(mc.Labels).To(HaveKeyWithValue(contract.LabelRuntimeID, localenv.RuntimeID))
		}).WithTimeout(within).Should(Succeed(), "the ModuleConfig mirrors the Module CR")
		Eventually(func(g Gomega) {
			sr := &v1alpha1.SyncResource{}
			g.Expect(env.KCP().Get(ctx, mcKey, sr)).To(Succeed())
			g.Expect(sr.Spec.Items).To(ContainElement(HaveField("Name", "config")))
			g.Expect(string(itemNamed(sr, "config").Resource.Raw)).To(ContainSubstring(`"greeting":"e2e-1"`))
		}).WithTimeout(within).Should(Succeed(), "the module manager's SyncResource")
		Eventually(configGreeting).WithContext(ctx).WithTimeout(within).Should(Equal("e2e-1"))
		Eventually(func(g Gomega) {
			d := &appsv1.Deployment{}
			g.Expect(env.SKR().Get(ctx, skrObj(localenv.SampleModule+"-workload"), d)).To(Succeed())
			g.Expect(d.Spec.Replicas).To(HaveValue(BeEquivalentTo(2)))
		}).WithTimeout(within).Should(Succeed())
		Expect(time.Since(began)).To(BeNumerically("<", within))
		Eventually(func(g Gomega) {
			sr := &v1alpha1.SyncResource{}
			g.Expect(env.KCP().Get(ctx, mcKey, sr)).To(Succeed())
			g.Expect(sr.Finalizers).To(ContainElement("operator.kyma-project.io/module-sync"))
			g.Expect(sr.Status.State).To(Equal(v1alpha1.StateReady))
			g.Expect(sr.Status.ObservedGeneration).To(Equal(sr.Generation))
			g.Expect(meta.IsStatusConditionTrue(sr.Status.Conditions, "Synced")).To(BeTrue())
			g.Expect(sr.Status.LastOperation).NotTo(BeNil())
			g.Expect(sr.Status.Items).To(HaveEach(HaveField("State", v1alpha1.ItemReady)))
		}).WithTimeout(within).Should(Succeed(), "the SyncResource's status")
	})

	It("removes an item's object from the SKR when the item leaves the SyncResource", func(ctx SpecContext) {
		setDebug := func(on bool) {
			patch := fmt.Sprintf(`{"spec":{"debug":%t}}`, on)
			Expect(env.SKR().Patch(ctx, localenv.NewSample("", 0), client.RawPatch("application/merge-patch+json", []byte(patch)))).To(Succeed())
		}
		setDebug(true)
		Eventually(func() error {
			return env.SKR().Get(ctx, skrObj(localenv.SampleModule+"-debug"), &corev1.ConfigMap{})
		}).WithTimeout(within).Should(Succeed())
		setDebug(false)
		Eventually(func() error {
			return env.SKR().Get(ctx, skrObj(localenv.SampleModule+"-debug"), &corev1.ConfigMap{})
		}).WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
	})

	It("leaves a changed CreateAndIgnore object alone and corrects drift of a CreateAndSync object", func(ctx SpecContext) {
		for _, name := range []string{localenv.SampleModule + "-defaults", localenv.SampleConfigMap} {
			cm := &corev1.ConfigMap{}
			Expect(env.SKR().Get(ctx, skrObj(name), cm)).To(Succeed())
			base := cm.DeepCopy() // a patch: module-sync may write the object meanwhile
			cm.Data["greeting"] = "changed in the SKR"
			Expect(env.SKR().Patch(ctx, cm, client.MergeFrom(base))).To(Succeed())
		}
		Eventually(configGreeting).WithContext(ctx).WithTimeout(within).Should(Equal("e2e-1"), "drift corrected")
		Consistently(func(g Gomega) {
			cm := &corev1.ConfigMap{}
			g.Expect(env.SKR().Get(ctx, skrObj(localenv.SampleModule+"-defaults"), cm)).To(Succeed())
			g.Expect(cm.Data).To(HaveKeyWithValue("greeting", "changed in the SKR"))
		}).WithTimeout(2*localenv.DriftInterval).Should(Succeed(), "CreateAndIgnore left alone")
	})

	It("deletes the ModuleConfig with the Module CR, and the SyncResource's objects with the SyncResource", func(ctx SpecContext) {
		Expect(env.SKR().Delete(ctx, localenv.NewSample("", 0))).To(Succeed())
		Eventually(func() error {
			return env.KCP().Get(ctx, mcKey, &v1alpha1.ModuleConfig{})
		}).WithTimeout(within).Should(Satisfy(apierrors.IsNotFound), "ModuleConfig gone")
		// The module manager deletes its SyncResource; module-sync removes
		// what it created before the finalizer goes.
		Eventually(func() error {
			return env.KCP().Get(ctx, mcKey, &v1alpha1.SyncResource{})
		}).WithTimeout(within).Should(Satisfy(apierrors.IsNotFound), "SyncResource gone")
		for _, name := range []string{localenv.SampleConfigMap, localenv.SampleModule + "-defaults"} {
			Expect(apierrors.IsNotFound(env.SKR().Get(ctx, skrObj(name), &corev1.ConfigMap{}))).To(BeTrue(), name)
		}
		Expect(apierrors.IsNotFound(env.SKR().Get(ctx, skrObj(localenv.SampleModule+"-workload"), &appsv1.Deployment{}))).To(BeTrue())
		// Back to where the other specs and `make run` expect it.
		Expect(ms.SetSample(ctx, "hello", 1)).To(Succeed())
		Eventually(configGreeting).WithContext(ctx).WithTimeout(within).Should(Equal("hello"))
	})

	Context("with bad input", func() {
		It("reports each bad item, applies the others and does not retry hot", func(ctx SpecContext) {
			sr := &v1alpha1.SyncResource{
				ObjectMeta: metav1.ObjectMeta{Name: "e2e-bad-items", Namespace: localenv.KymaNamespace, Annotations: writtenBy(ctx, env.KCP())},
				Spec: v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: localenv.SampleModule, Items: []v1alpha1.SyncItem{
					item("good", configMapJSON("e2e-good")),
					item("invalid", `{"apiVersion":"v1","kind":"ConfigMap","metadata":{"namespace":"kyma-system"}}`),
					item("secret", `{"apiVersion":"v1","kind":"Secret","metadata":{"name":"e2e-secret","namespace":"kyma-system"},"stringData":{"password":"x"}}`),
					item("missing-crd", `{"apiVersion":"nothing.example.com/v1","kind":"Widget","metadata":{"name":"w","namespace":"kyma-system"}}`),
				}},
			}
			Expect(env.KCP().Create(ctx, sr)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) {
				Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, sr))).To(Succeed())
				Eventually(func() error { return env.SKR().Get(ctx, skrObj("e2e-good"), &corev1.ConfigMap{}) }).
					WithTimeout(within).Should(Satisfy(apierrors.IsNotFound), "deleting the SyncResource removes its objects")
			})
			Eventually(func(g Gomega) {
				got := &v1alpha1.SyncResource{}
				g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(sr), got)).To(Succeed())
				g.Expect(got.Status.Items).To(ConsistOf(
					SatisfyAll(HaveField("Name", "good"), HaveField("State", v1alpha1.ItemReady)),
					SatisfyAll(HaveField("Name", "invalid"), HaveField("State", v1alpha1.ItemError), HaveField("Message", ContainSubstring("invalid"))),
					SatisfyAll(HaveField("Name", "secret"), HaveField("State", v1alpha1.ItemRefused)),
					SatisfyAll(HaveField("Name", "missing-crd"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring("ModuleGrant kcp-system/sample does not grant the kind Widget.nothing.example.com"))),
				))
				g.Expect(got.Status.State).To(Equal(v1alpha1.StateError))
				c := meta.FindStatusCondition(got.Status.Conditions, "Synced")
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Status).To(Equal(metav1.ConditionFalse))
				g.Expect(c.Message).To(SatisfyAll(ContainSubstring("invalid"), ContainSubstring("missing-crd"), ContainSubstring("secret")))
			}).WithTimeout(within).Should(Succeed())
			Expect(env.SKR().Get(ctx, skrObj("e2e-good"), &corev1.ConfigMap{})).To(Succeed(), "the good item applied")
			Expect(apierrors.IsNotFound(env.SKR().Get(ctx, skrObj("e2e-secret"), &corev1.Secret{}))).To(BeTrue(), "no Secret from the KCP")
			expectNoHotRetry(ctx, ms, "retry")
		})

		It("reports an unreachable runtime and backs off", func(ctx SpecContext) {
			const id = "e2e-unreachable"
			secret, kyma := unreachableRuntime(id)
			sr := &v1alpha1.SyncResource{
				ObjectMeta: metav1.ObjectMeta{Name: id, Namespace: localenv.KymaNamespace, Annotations: writtenBy(ctx, env.KCP())},
				Spec: v1alpha1.SyncResourceSpec{Kyma: id, Module: localenv.SampleModule, Items: []v1alpha1.SyncItem{
					item("a", configMapJSON("e2e-a")), item("b", configMapJSON("e2e-b")),
				}},
			}
			Expect(env.KCP().Create(ctx, secret)).To(Succeed())
			Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
			Expect(env.KCP().Create(ctx, sr)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) {
				// Without its kubeconfig Secret the runtime counts as gone:
				// the finalizers (module-sync's, vs-controller's) go.
				Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, secret))).To(Succeed())
				Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, sr))).To(Succeed())
				Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, kyma))).To(Succeed())
				Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(sr), &v1alpha1.SyncResource{}) }).
					WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
			})
			Eventually(func(g Gomega) {
				got := &v1alpha1.SyncResource{}
				g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(sr), got)).To(Succeed())
				g.Expect(got.Status.State).To(Equal(v1alpha1.StateError))
				c := meta.FindStatusCondition(got.Status.Conditions, "Synced")
				g.Expect(c).NotTo(BeNil())
				g.Expect(c.Reason).To(Equal("RuntimeUnreachable"))
				g.Expect(got.Status.Items).To(HaveLen(2))
				g.Expect(got.Status.Items).To(HaveEach(HaveField("State", v1alpha1.ItemError)))
			}).WithTimeout(within).Should(Succeed())
			expectNoHotRetry(ctx, ms, "retry")
		})
	})
})

// expectNoHotRetry: over 8 s, module-sync's SyncResource reconciles with
// the given result grow by at most 5 (the backoff starts at 1 s and
// doubles; a hot retry would be hundreds).
func expectNoHotRetry(ctx context.Context, ms e2e.ModuleSyncEnvironment, result string) {
	GinkgoHelper()
	const name = "runtime_watcher_module_sync_syncresource_reconciles_total"
	before := counter(ctx, ms, name, result)
	Consistently(func() float64 { return counter(ctx, ms, name, result) - before }).
		WithTimeout(8*time.Second).WithPolling(500*time.Millisecond).
		Should(BeNumerically("<=", 5), "reconciles with result %q in 8 s", result)
}

// counter reads a counter of module-sync's /metrics with label result.
func counter(ctx context.Context, ms e2e.ModuleSyncEnvironment, name, result string) float64 {
	v, _ := promtext.Sum(fetchMetrics(ctx, ms.ModuleSyncMetricsURL()), name, map[string]string{"result": result})
	return v
}

func item(name, resource string) v1alpha1.SyncItem {
	return v1alpha1.SyncItem{Name: name, Strategy: v1alpha1.CreateAndSync, Resource: k8sruntime.RawExtension{Raw: []byte(resource)}}
}

func configMapJSON(name string) string {
	b, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": name, "namespace": localenv.SKRNamespace}, "data": map[string]any{"k": "v"}})
	return string(b)
}

func itemNamed(sr *v1alpha1.SyncResource, name string) v1alpha1.SyncItem {
	for _, it := range sr.Spec.Items {
		if it.Name == name {
			return it
		}
	}
	return v1alpha1.SyncItem{}
}

// unreachableRuntime is a Kyma of runtime id and its kubeconfig Secret: a
// verified kubeconfig (an insecure one is refused before any connection)
// of a server that is not there. Delete the Secret first: without it the
// runtime counts as gone and the Kyma's finalizers go.
func unreachableRuntime(id string) (*corev1.Secret, *unstructured.Unstructured) {
	GinkgoHelper()
	ca, err := pki.NewCA("unreachable-ca")
	Expect(err).NotTo(HaveOccurred())
	kubeconfig := []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1", certificate-authority-data: "` + base64.StdEncoding.EncodeToString(ca.PEM) + `"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`)
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: skrclient.SecretName(id), Namespace: localenv.KymaNamespace},
		Data: map[string][]byte{skrclient.SecretKey: kubeconfig}}
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(localenv.KymaNamespace)
	kyma.SetName(id)
	return secret, kyma
}
