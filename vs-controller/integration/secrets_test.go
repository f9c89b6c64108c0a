package integration_test

import (
	"context"
	"maps"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
)

var ours = map[string]string{contract.LabelPartOf: contract.PartOf}

// cached reads a Secret of the Kyma namespace through vs-controller's own
// cached client.
func cached(ctx context.Context, name string) func() error {
	return func() error {
		return vsMgr.GetClient().Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: name}, &corev1.Secret{})
	}
}

func isNotFound(f func() error) func() bool {
	return func() bool { return apierrors.IsNotFound(f()) }
}

// skrLeafCN is the common name of the certificate in the SKR's
// skr-webhook-tls.
func skrLeafCN(ctx context.Context) func() (string, error) {
	return func() (string, error) {
		s := &corev1.Secret{}
		if err := skrGet(ctx, s, bundle.DefaultNamespace, bundle.SecretName)(); err != nil {
			return "", err
		}
		return parseCert(s.Data[certificates.KeyCert]).Subject.CommonName, nil
	}
}

var _ = Describe("Least privilege: vs-controller's Secret cache", Label("bounds"), Ordered, func() {
	It("holds only Secrets labelled app.kubernetes.io/part-of=runtime-watcher; its API reader sees the others", func(ctx SpecContext) {
		other := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: "someone-elses"}, StringData: map[string]string{"password": "x"}}
		Expect(kcp.Client.Create(ctx, other)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, other))).To(Succeed()) })
		mine := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: "runtime-watchers", Labels: maps.Clone(ours)}}
		Expect(kcp.Client.Create(ctx, mine)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, mine))).To(Succeed()) })

		// One watch delivers a namespace's events in order: once the Secret
		// created second is in the cache, the first would be too if the
		// cache held it.
		Eventually(cached(ctx, mine.Name)).Should(Succeed())
		Expect(apierrors.IsNotFound(cached(ctx, other.Name)())).To(BeTrue(), "an unlabelled Secret is in vs-controller's cache")
		Expect(vsMgr.GetAPIReader().Get(ctx, client.ObjectKeyFromObject(other), &corev1.Secret{})).To(Succeed())
		var list corev1.SecretList
		Expect(vsMgr.GetClient().List(ctx, &list, client.InNamespace(kymaNS))).To(Succeed())
		Expect(list.Items).To(ContainElement(HaveField("Name", mine.Name)))
		Expect(list.Items).To(HaveEach(HaveField("Labels", HaveKeyWithValue(contract.LabelPartOf, contract.PartOf))))

		By("labelling the Secret: it joins the cache; unlabelling it: it leaves")
		other.Labels = maps.Clone(ours)
		Expect(kcp.Client.Update(ctx, other)).To(Succeed())
		Eventually(cached(ctx, other.Name)).Should(Succeed())
		other.Labels = nil
		Expect(kcp.Client.Update(ctx, other)).To(Succeed())
		Eventually(isNotFound(cached(ctx, other.Name))).Should(BeTrue())
	})

	It("gets the label on a certificate Secret issued before the Certificate had the secretTemplate, without a re-issue", func(ctx SpecContext) {
		crt := &certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: "issued-before-the-label"},
			Spec: certmanagerv1.CertificateSpec{
				CommonName: "issued-before-the-label", SecretName: "issued-before-the-label",
				IssuerRef: cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"},
			},
		}
		Expect(kcp.Client.Create(ctx, crt)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, crt))).To(Succeed())
			Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: crt.Spec.SecretName}}))).To(Succeed())
		})
		issued := &corev1.Secret{}
		Eventually(func() error {
			return kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: crt.Spec.SecretName}, issued)
		}).Should(Succeed())
		Expect(issued.Labels).NotTo(HaveKey(contract.LabelPartOf))

		// A patch, not an Update: cert-manager writes the Certificate's status
		// while it issues, and an Update from an older read would conflict.
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(crt), crt)).To(Succeed())
		base := crt.DeepCopy()
		crt.Spec.SecretTemplate = &certmanagerv1.CertificateSecretTemplate{Labels: maps.Clone(ours)}
		Expect(kcp.Client.Patch(ctx, crt, client.MergeFrom(base))).To(Succeed())
		Eventually(cached(ctx, crt.Spec.SecretName)).Should(Succeed())
		now := &corev1.Secret{}
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(issued), now)).To(Succeed())
		Expect(now.Labels).To(HaveKeyWithValue(contract.LabelPartOf, contract.PartOf))
		Expect(now.Data[certificates.KeyCert]).To(Equal(issued.Data[certificates.KeyCert]), "re-issued")
	})

	for _, labelled := range []bool{false, true} {
		name := map[bool]string{false: "unlabelled", true: "labelled"}[labelled]
		It("brings the bundle to a runtime whose "+name+" kubeconfig Secret appears after its Kyma, and removes it again", func(ctx SpecContext) {
			id := "runtime-" + name
			kyma := newKyma("kyma-"+name, id, id+".skr.example.com")
			Expect(kcp.Client.Create(ctx, kyma)).To(Succeed())
			kc := kubeconfigSecret(id, kubeconfigOf(skr))
			if labelled {
				kc.Labels = maps.Clone(ours)
			}
			DeferCleanup(func(ctx SpecContext) {
				Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, kyma))).To(Succeed())
				Eventually(isNotFound(func() error { return kcp.Client.Get(ctx, client.ObjectKeyFromObject(kyma), kyma) })).Should(BeTrue())
				Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, kc))).To(Succeed())
			})
			Consistently(func() error { _, err := certificateOf(ctx, id); return err }, "300ms").ShouldNot(Succeed(),
				"without a kubeconfig Secret nothing is done for the runtime")
			Expect(kcp.Client.Create(ctx, kc)).To(Succeed())

			Eventually(skrLeafCN(ctx)).Should(Equal(id))
			Eventually(kymaEvents(ctx, kyma.GetName())).Should(ContainElement("Normal/" + runtimes.ReasonBundleApplied))
			Expect(cached(ctx, certificates.Name(id))()).To(Succeed(), "the runtime's certificate Secret is not in the cache")
			if labelled {
				Expect(cached(ctx, skrclient.SecretName(id))()).To(Succeed())
			} else {
				Expect(apierrors.IsNotFound(cached(ctx, skrclient.SecretName(id))())).To(BeTrue(), "an unlabelled kubeconfig Secret is in the cache")
			}

			By("deleting the Kyma: the bundle goes, through the same kubeconfig")
			Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(kyma), kyma)).To(Succeed()) // its UID, for its Events
			Expect(kcp.Client.Delete(ctx, kyma)).To(Succeed())
			Eventually(isNotFound(func() error {
				return kcp.Client.Get(ctx, client.ObjectKeyFromObject(kyma), newKyma("", "", ""))
			})).Should(BeTrue())
			Expect(apierrors.IsNotFound(skrGet(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{}, "", bundle.Name)())).To(BeTrue())
			Eventually(func() []string { return reasons(eventsFor(ctx, kyma)) }).Should(ContainElement("Normal/" + runtimes.ReasonBundleRemoved))
			Expect(reasons(eventsFor(ctx, kyma))).NotTo(ContainElement("Warning/" + runtimes.ReasonBundleLeft))
		})
	}
})
