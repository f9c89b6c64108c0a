package integration_test

import (
	"context"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/apply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/metrics"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
)

// applyLMBundle applies LM's ten SKR objects (test/fixtures/lifecycle-manager/skr-bundle)
// into the SKR as LM does: server-side apply, forced, field manager
// lifecycle-manager.
func applyLMBundle(ctx context.Context) {
	files, err := filepath.Glob(filepath.Join(lmFixtures, "skr-bundle", "*-rendered.yaml"))
	Expect(err).NotTo(HaveOccurred())
	Expect(files).To(HaveLen(10))
	for _, f := range files {
		for _, kind := range []string{"Deployment", "Service", "Secret", "ValidatingWebhookConfiguration", "PriorityClass", "NetworkPolicy"} {
			for _, u := range lmObjects(filepath.Join("skr-bundle", filepath.Base(f)), kind) {
				if kind == "ValidatingWebhookConfiguration" || kind == "PriorityClass" {
					u.SetNamespace("")
				}
				Expect(skr.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u),
					client.FieldOwner(runtimes.LMFieldManager), client.ForceOwnership)).To(Succeed(), f)
			}
		}
	}
}

// setReady gives a Deployment in the SKR one ready replica (the SKR test
// API server has no controllers or kubelet).
func setReady(ctx context.Context, name string) {
	d := &appsv1.Deployment{}
	Expect(skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: name}, d)).To(Succeed())
	d.Status = appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, ObservedGeneration: d.Generation}
	Expect(skr.Client.Status().Update(ctx, d)).To(Succeed())
}

func kymaMessages(ctx context.Context, name, reason string) []string {
	k := newKyma(name, "", "")
	Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)).To(Succeed())
	var out []string
	for _, e := range eventsFor(ctx, k) {
		if e.Reason == reason {
			out = append(out, e.Message)
		}
	}
	return out
}

func lmLeft(ctx context.Context) func() ([]bundle.Ref, error) {
	return func() ([]bundle.Ref, error) { return bundle.FindLifecycleManager(ctx, skr.Client, bundle.Options{}) }
}

var _ = Describe("Take-over of a runtime Lifecycle Manager set up", Ordered, func() {
	const (
		kymaName  = "kyma-lm"
		runtimeID = "runtime-lm"
		domain    = "runtime-lm.skr.example.com"
	)
	var watcherNS string

	BeforeAll(func(ctx SpecContext) {
		if err := skr.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bundle.DefaultNamespace}}); err != nil {
			Expect(apierrors.IsAlreadyExists(err)).To(BeTrue())
		}
		applyLMBundle(ctx)
		Expect(lmLeft(ctx)()).To(HaveLen(10))
		watcherNS = newNamespace(ctx, "adopt-watchers")
		Expect(kcp.Client.Create(ctx, newWatcher(watcherNS, "klm-watcher", "lifecycle-manager", map[string]string{"x": "y"}))).To(Succeed())
		Expect(kcp.Client.Create(ctx, kubeconfigSecret(runtimeID, kubeconfigOf(skr)))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newKyma(kymaName, runtimeID, domain))).To(Succeed())
	})

	AfterAll(func(ctx SpecContext) {
		k := newKyma(kymaName, "", "")
		Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, k))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)) }).Should(BeTrue())
		Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, kubeconfigSecret(runtimeID, nil)))).To(Succeed())
	})

	It("waits while LM is not stopped for the runtime, touching nothing", func(ctx SpecContext) {
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Warning/" + runtimes.ReasonLMActive))
		Expect(lmLeft(ctx)()).To(HaveLen(10))
		Expect(kymaMessages(ctx, kymaName, runtimes.ReasonLMActive)).To(ContainElement(ContainSubstring("CN=klm-watcher-selfsigned-ca")),
			"the Event names the issuer of LM's certificate in the SKR")
		Expect(testutil.ToFloat64(metrics.RuntimesOnLMCertificate)).To(BeEquivalentTo(1))
		err := skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.TakeoverName}, &appsv1.Deployment{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no take-over Deployment before LM is stopped")
	})

	It("brings up its webhook beside LM's once the Kyma says LM is stopped, and waits for it", func(ctx SpecContext) {
		k := newKyma(kymaName, "", "")
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)).To(Succeed())
		labels := k.GetLabels()
		labels[runtimes.SkipReconciliationLabel] = "true"
		k.SetLabels(labels)
		Expect(kcp.Client.Update(ctx, k)).To(Succeed())

		dep := &appsv1.Deployment{}
		Eventually(skrGet(ctx, dep, bundle.DefaultNamespace, bundle.TakeoverName)).Should(Succeed())
		Expect(dep.Spec.Selector.MatchLabels).To(HaveKeyWithValue(bundle.TakeoverPodLabel, "true"))
		Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue("app.kubernetes.io/name", bundle.Name), "the Service will select it")
		Expect(dep.Spec.Template.Spec.Volumes[0].Secret.SecretName).To(Equal(bundle.TakeoverSecretName))
		sec := &corev1.Secret{}
		Expect(skrGet(ctx, sec, bundle.DefaultNamespace, bundle.TakeoverSecretName)()).To(Succeed())
		Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		Expect(sec.Data[bundle.KeyCA]).To(Equal(ca.PEM))
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + runtimes.ReasonAdoptionWaits))

		// Admission still goes to LM's webhook: nothing switched before ours is ready.
		Expect(lmLeft(ctx)()).To(HaveLen(10))
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
		Expect(vwc.Webhooks).To(HaveLen(1))
		Expect(vwc.Webhooks[0].Name).To(Equal("kcp-system.klm-watcher.operator.kyma-project.io"))
	})

	It("switches admission when its webhook is ready, then removes LM's objects", func(ctx SpecContext) {
		setReady(ctx, bundle.TakeoverName)
		Eventually(lmLeft(ctx)).Should(BeEmpty())
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + runtimes.ReasonAdopted))
		Expect(testutil.ToFloat64(metrics.RuntimesOnLMCertificate)).To(BeEquivalentTo(0))

		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
		Expect(vwc.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))
		Expect(vwc.Annotations).To(HaveKey(apply.HashAnnotation))
		names := []string{}
		for _, h := range vwc.Webhooks {
			names = append(names, h.Name)
			Expect(h.ClientConfig.CABundle).To(Equal(ca.PEM), h.Name)
		}
		Expect(names).To(Equal(usableWebhookNames(ctx)), "ours, not LM's kcp-system.klm-watcher")
		for _, m := range vwc.ManagedFields {
			Expect(m.Manager).NotTo(Equal(runtimes.LMFieldManager))
		}

		svc := &corev1.Service{}
		Expect(skrGet(ctx, svc, bundle.DefaultNamespace, bundle.Name)()).To(Succeed())
		Expect(svc.Spec.Selector).To(Equal(map[string]string{"app.kubernetes.io/name": bundle.Name}), "LM's app: skr-webhook is gone")
		Expect(svc.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))
		for _, m := range svc.ManagedFields {
			Expect(m.Manager).NotTo(Equal(runtimes.LMFieldManager))
		}

		// Our bundle under its own names, created new (immutable fields).
		sec := &corev1.Secret{}
		Eventually(skrGet(ctx, sec, bundle.DefaultNamespace, bundle.SecretName)).Should(Succeed())
		Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		dep := &appsv1.Deployment{}
		Eventually(skrGet(ctx, dep, bundle.DefaultNamespace, bundle.Name)).Should(Succeed())
		Expect(dep.Spec.Selector.MatchLabels).To(Equal(map[string]string{"app.kubernetes.io/name": bundle.Name}))
		Expect(dep.Annotations).To(HaveKey(apply.HashAnnotation))
		for _, ref := range []string{bundle.LMMetricsServiceName} {
			Expect(apierrors.IsNotFound(skrGet(ctx, &corev1.Service{}, bundle.DefaultNamespace, ref)())).To(BeTrue())
		}
		// The take-over webhook serves until ours is ready.
		Expect(skrGet(ctx, &appsv1.Deployment{}, bundle.DefaultNamespace, bundle.TakeoverName)()).To(Succeed())
	})

	It("removes the take-over Deployment and Secret once its skr-webhook is ready", func(ctx SpecContext) {
		setReady(ctx, bundle.Name)
		Eventually(func() bool {
			return apierrors.IsNotFound(skrGet(ctx, &appsv1.Deployment{}, bundle.DefaultNamespace, bundle.TakeoverName)())
		}).Should(BeTrue())
		Eventually(func() bool {
			return apierrors.IsNotFound(skrGet(ctx, &corev1.Secret{}, bundle.DefaultNamespace, bundle.TakeoverSecretName)())
		}).Should(BeTrue())
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + runtimes.ReasonAdoptionDone))
		Expect(lmLeft(ctx)()).To(BeEmpty())
	})
})
