package integration_test

import (
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// docs/architecture.md §4.9: the runtime Issuer is namespaced, so nobody outside
// vs-controller's namespace can mint a runtime's identity with it.
var _ = Describe("the runtime Issuer", func() {
	It("does not issue a Certificate in another namespace that names it", func(ctx SpecContext) {
		Expect(kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "intruder"}})).To(Succeed())
		forged := &certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: "intruder", Name: "forged"},
			Spec: certmanagerv1.CertificateSpec{
				CommonName: "runtime-victim", DNSNames: []string{"victim.skr.example.com"}, SecretName: "forged",
				IssuerRef: cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"},
			},
		}
		Expect(kcp.Client.Create(ctx, forged)).To(Succeed())
		// The same request in the runtime namespace is issued: the Issuer works.
		control := forged.DeepCopy()
		control.ObjectMeta = metav1.ObjectMeta{Namespace: kymaNS, Name: "control"}
		control.Spec.SecretName = "control"
		Expect(kcp.Client.Create(ctx, control)).To(Succeed())
		Eventually(func() error {
			return kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: "control"}, &corev1.Secret{})
		}).Should(Succeed())

		// cert-manager: the Certificate is not Ready, its Secret does not
		// exist; its CertificateRequest waits for an Issuer that is not there.
		Eventually(func() string {
			Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(forged), forged)).To(Succeed())
			for _, c := range forged.Status.Conditions {
				if c.Type == certmanagerv1.CertificateConditionReady {
					return string(c.Status) + "/" + c.Reason
				}
			}
			return ""
		}).Should(Equal("False/DoesNotExist"))
		Eventually(func() []string {
			var reqs certmanagerv1.CertificateRequestList
			Expect(kcp.Client.List(ctx, &reqs, client.InNamespace("intruder"))).To(Succeed())
			var ready []string
			for _, r := range reqs.Items {
				for _, c := range r.Status.Conditions {
					if c.Type == certmanagerv1.CertificateRequestConditionReady {
						ready = append(ready, string(c.Status)+"/"+c.Reason)
					}
				}
			}
			return ready
		}).Should(Equal([]string{"False/" + certmanagerv1.CertificateRequestReasonPending}))
		Consistently(func() bool {
			return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKey{Namespace: "intruder", Name: "forged"}, &corev1.Secret{}))
		}).WithTimeout(2*time.Second).Should(BeTrue(), "a Certificate outside the runtime namespace was issued")
	})
})
