package integration_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
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
					client.FieldOwner(takeover.LMFieldManager), client.ForceOwnership)).To(Succeed(), f)
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

// takeOver returns the Kyma's condition takeover.ConditionTakeOver ("" reason
// when absent), the Kyma's resourceVersion and all its condition types.
func takeOver(ctx context.Context, name string) (metav1.Condition, string, []string) {
	k := newKyma(name, "", "")
	ExpectWithOffset(1, kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)).To(Succeed())
	raw, _, err := unstructured.NestedSlice(k.Object, "status", "conditions")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	var out metav1.Condition
	var types []string
	for _, v := range raw {
		var c metav1.Condition
		ExpectWithOffset(1, runtime.DefaultUnstructuredConverter.FromUnstructured(v.(map[string]any), &c)).To(Succeed())
		types = append(types, c.Type)
		if c.Type == takeover.ConditionTakeOver {
			out = c
		}
	}
	return out, k.GetResourceVersion(), types
}

func takeOverReason(ctx context.Context, name string) func() string {
	return func() string { c, _, _ := takeOver(ctx, name); return c.Reason }
}

// onLMCertificate lists the series of the per-runtime gauge, as
// "<runtime>/<kyma>=<value>".
func onLMCertificate() []string {
	series, err := promtext.Collected(vsmetrics.RuntimeOnLMCertificate, "runtime", "kyma")
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	out := []string{}
	for k, v := range series {
		out = append(out, fmt.Sprintf("%s=%g", k, v))
	}
	slices.Sort(out)
	return out
}

// setKymaLabel sets (or with "" removes) a label of the Kyma.
func setKymaLabel(ctx context.Context, name, key, value string) {
	k := newKyma(name, "", "")
	ExpectWithOffset(1, kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)).To(Succeed())
	base := k.DeepCopy() // a patch: vs-controller writes the Kyma's conditions meanwhile
	labels := k.GetLabels()
	if value == "" {
		delete(labels, key)
	} else {
		labels[key] = value
	}
	k.SetLabels(labels)
	ExpectWithOffset(1, kcp.Client.Patch(ctx, k, client.MergeFrom(base))).To(Succeed())
}

var _ = Describe("Take-over of a runtime Lifecycle Manager set up", Ordered, func() {
	const (
		kymaName  = "kyma-lm"
		runtimeID = "runtime-lm"
		domain    = "runtime-lm.skr.example.com"
		// lmCondition: a condition type LM sets on Kymas.
		lmCondition = "ModuleReady"
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
		// A condition of LM's, which vs-controller's must leave alone.
		Expect(retry.RetryOnConflict(retry.DefaultRetry, func() error {
			k := newKyma(kymaName, "", "")
			if err := kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
				return err
			}
			conds, _, _ := unstructured.NestedSlice(k.Object, "status", "conditions")
			conds = append(conds, map[string]any{"type": lmCondition, "status": "True", "reason": "Ready", "message": "LM's", "lastTransitionTime": "2026-01-02T03:04:05Z"})
			Expect(unstructured.SetNestedSlice(k.Object, conds, "status", "conditions")).To(Succeed())
			return kcp.Client.Status().Update(ctx, k)
		})).To(Succeed())
	})

	AfterAll(func(ctx SpecContext) {
		k := newKyma(kymaName, "", "")
		Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, k))).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)) }).Should(BeTrue())
		Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, kubeconfigSecret(runtimeID, nil)))).To(Succeed())
	})

	It("waits while LM is not stopped for the runtime, touching nothing", func(ctx SpecContext) {
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Warning/" + takeover.ReasonLMActive))
		Expect(lmLeft(ctx)()).To(HaveLen(10))
		Expect(kymaMessages(ctx, kymaName, takeover.ReasonLMActive)).To(ContainElement(ContainSubstring("CN=klm-watcher-selfsigned-ca")),
			"the Event names the issuer of LM's certificate in the SKR")
		Expect(testutil.ToFloat64(vsmetrics.RuntimesOnLMCertificate)).To(BeEquivalentTo(1))
		Expect(onLMCertificate()).To(Equal([]string{runtimeID + "/" + kymaName + "=1"}), "the per-runtime gauge names it")
		Eventually(takeOverReason(ctx, kymaName)).Should(Equal(takeover.CondReasonWaitingForLM))
		cond, _, _ := takeOver(ctx, kymaName)
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(cond.Message).To(ContainSubstring("CN=klm-watcher-selfsigned-ca"))
		Expect(cond.Message).To(ContainSubstring(takeover.SkipReconciliationLabel + "=true"))

		By("writing nothing on a second pass")
		_, rv, _ := takeOver(ctx, kymaName)
		statusWrites := testutil.ToFloat64(vsmetrics.RuntimeWrites.WithLabelValues("kyma-status"))
		passes := testutil.ToFloat64(vsmetrics.Adoptions.WithLabelValues("lm-active"))
		setKymaLabel(ctx, kymaName, takeover.SkipReconciliationLabel, "false") // a pass, still waiting
		Eventually(func() float64 { return testutil.ToFloat64(vsmetrics.Adoptions.WithLabelValues("lm-active")) }).Should(BeNumerically(">", passes))
		_, rv2, types := takeOver(ctx, kymaName)
		Expect(testutil.ToFloat64(vsmetrics.RuntimeWrites.WithLabelValues("kyma-status"))).To(Equal(statusWrites))
		Expect(rv2).NotTo(Equal(rv), "the label's update")
		Expect(types).To(ConsistOf(lmCondition, takeover.ConditionTakeOver))

		err := skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.TakeoverName}, &appsv1.Deployment{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "no take-over Deployment before LM is stopped")
	})

	It("brings up its webhook beside LM's once the Kyma says LM is stopped, and waits for it", func(ctx SpecContext) {
		setKymaLabel(ctx, kymaName, takeover.SkipReconciliationLabel, "true")

		dep := &appsv1.Deployment{}
		Eventually(skrGet(ctx, dep, bundle.DefaultNamespace, bundle.TakeoverName)).Should(Succeed())
		Expect(dep.Spec.Selector.MatchLabels).To(HaveKeyWithValue(bundle.TakeoverPodLabel, "true"))
		Expect(dep.Spec.Template.Labels).To(HaveKeyWithValue("app.kubernetes.io/name", bundle.Name), "the Service will select it")
		Expect(dep.Spec.Template.Spec.Volumes[0].Secret.SecretName).To(Equal(bundle.TakeoverSecretName))
		sec := &corev1.Secret{}
		Expect(skrGet(ctx, sec, bundle.DefaultNamespace, bundle.TakeoverSecretName)()).To(Succeed())
		Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		Expect(sec.Data[certificates.KeyCA]).To(Equal(ca.PEM))
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + takeover.ReasonAdoptionWaits))
		cond, _, _ := takeOver(ctx, kymaName)
		Expect(cond.Reason).To(Equal(takeover.CondReasonAdopting))
		Expect(cond.Status).To(Equal(metav1.ConditionFalse))
		Expect(onLMCertificate()).To(Equal([]string{runtimeID + "/" + kymaName + "=1"}), "still on LM's certificate")

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
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + takeover.ReasonAdopted))
		Expect(testutil.ToFloat64(vsmetrics.RuntimesOnLMCertificate)).To(BeEquivalentTo(0))
		Expect(onLMCertificate()).To(BeEmpty(), "the runtime's series is deleted")
		Eventually(takeOverReason(ctx, kymaName)).Should(Equal(takeover.CondReasonTakenOver))
		cond, _, _ := takeOver(ctx, kymaName)
		Expect(cond.Status).To(Equal(metav1.ConditionTrue))

		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
		Expect(vwc.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))
		Expect(vwc.Annotations).To(HaveKey(diffapply.HashAnnotation))
		names := []string{}
		for _, h := range vwc.Webhooks {
			names = append(names, h.Name)
			Expect(h.ClientConfig.CABundle).To(Equal(ca.PEM), h.Name)
		}
		Expect(names).To(Equal(usableWebhookNames(ctx)), "ours, not LM's kcp-system.klm-watcher")
		for _, m := range vwc.ManagedFields {
			Expect(m.Manager).NotTo(Equal(takeover.LMFieldManager))
		}

		svc := &corev1.Service{}
		Expect(skrGet(ctx, svc, bundle.DefaultNamespace, bundle.Name)()).To(Succeed())
		Expect(svc.Spec.Selector).To(Equal(map[string]string{"app.kubernetes.io/name": bundle.Name}), "LM's app: skr-webhook is gone")
		Expect(svc.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))
		for _, m := range svc.ManagedFields {
			Expect(m.Manager).NotTo(Equal(takeover.LMFieldManager))
		}

		// Our bundle under its own names, created new (immutable fields).
		sec := &corev1.Secret{}
		Eventually(skrGet(ctx, sec, bundle.DefaultNamespace, bundle.SecretName)).Should(Succeed())
		Expect(sec.Type).To(Equal(corev1.SecretTypeTLS))
		dep := &appsv1.Deployment{}
		Eventually(skrGet(ctx, dep, bundle.DefaultNamespace, bundle.Name)).Should(Succeed())
		Expect(dep.Spec.Selector.MatchLabels).To(Equal(map[string]string{"app.kubernetes.io/name": bundle.Name}))
		Expect(dep.Annotations).To(HaveKey(diffapply.HashAnnotation))
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
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + takeover.ReasonAdoptionDone))
		Expect(lmLeft(ctx)()).To(BeEmpty())

		By("keeping the condition, LM's condition, and writing nothing on a second pass")
		cond, _, types := takeOver(ctx, kymaName)
		Expect(cond.Reason).To(Equal(takeover.CondReasonTakenOver))
		Expect(types).To(ConsistOf(lmCondition, takeover.ConditionTakeOver))
		statusWrites := testutil.ToFloat64(vsmetrics.RuntimeWrites.WithLabelValues("kyma-status"))
		passes := testutil.ToFloat64(vsmetrics.RuntimeReconciles.WithLabelValues("unchanged"))
		setKymaLabel(ctx, kymaName, takeover.SkipReconciliationLabel, "") // a pass
		_, rv, _ := takeOver(ctx, kymaName)
		Eventually(func() float64 { return testutil.ToFloat64(vsmetrics.RuntimeReconciles.WithLabelValues("unchanged")) }).Should(BeNumerically(">", passes))
		cond2, rv2, _ := takeOver(ctx, kymaName)
		Expect(rv2).To(Equal(rv), "no write to the Kyma")
		Expect(cond2).To(Equal(cond))
		Expect(testutil.ToFloat64(vsmetrics.RuntimeWrites.WithLabelValues("kyma-status"))).To(Equal(statusWrites))
	})
})
