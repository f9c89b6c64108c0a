package cmcontrollers_test

import (
	"context"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr/testr"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// cert-manager's own behaviour the project's code and tests depend on
// (issue 25): what the imitation it replaced got wrong.
func TestCertManagerIssues(t *testing.T) {
	g := NewWithT(t)
	g.SetDefaultEventuallyTimeout(time.Minute)
	g.SetDefaultEventuallyPollingInterval(100 * time.Millisecond)
	kcp := testenv.StartForTest(t, "kcp").Cluster("kcp")
	g.Expect(kcp.StartControllerManager()).To(Succeed())

	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- cmcontrollers.Run(ctx, cmcontrollers.Options{Kubeconfig: kcp.KubeconfigPath, Log: testr.New(t)})
	}()
	t.Cleanup(func() { cancel(); g.Expect(<-done).To(Succeed()) })

	for _, ns := range []string{"own", "other"} {
		g.Expect(kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	ca, err := pki.NewCA("cmcontrollers test CA") // valid for a day
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(cmcontrollers.InstallCA(ctx, kcp.Client, ca, "own", "ca")).To(Succeed())

	certificate := func(ns string) *certmanagerv1.Certificate {
		return &certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "leaf"},
			Spec: certmanagerv1.CertificateSpec{
				CommonName: "leaf", DNSNames: []string{"leaf.example.com"}, SecretName: "leaf",
				IssuerRef: cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
			},
		}
	}
	ready := func(crt *certmanagerv1.Certificate) func() string {
		return func() string {
			g.Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(crt), crt)).To(Succeed())
			for _, c := range crt.Status.Conditions {
				if c.Type == certmanagerv1.CertificateConditionReady {
					return string(c.Status) + "/" + c.Reason
				}
			}
			return ""
		}
	}

	t.Log("a Certificate without privateKey gets an RSA 2048 key; its leaf outlives the CA that signed it")
	own := certificate("own")
	g.Expect(kcp.Client.Create(ctx, own)).To(Succeed())
	g.Eventually(ready(own)).Should(Equal("True/Ready"))
	secret := &corev1.Secret{}
	g.Expect(kcp.Client.Get(ctx, client.ObjectKey{Namespace: "own", Name: "leaf"}, secret)).To(Succeed())
	pair, err := tls.X509KeyPair(secret.Data[corev1.TLSCertKey], secret.Data[corev1.TLSPrivateKeyKey])
	g.Expect(err).NotTo(HaveOccurred())
	key, isRSA := pair.PrivateKey.(*rsa.PrivateKey)
	g.Expect(isRSA).To(BeTrue(), "cert-manager's default key algorithm")
	g.Expect(key.N.BitLen()).To(Equal(2048))
	block, _ := pem.Decode(secret.Data[corev1.TLSCertKey])
	leaf, err := x509.ParseCertificate(block.Bytes)
	g.Expect(err).NotTo(HaveOccurred())
	_, err = leaf.Verify(x509.VerifyOptions{Roots: ca.Pool(), CurrentTime: time.Now(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(leaf.NotAfter).To(BeTemporally(">", ca.Cert.NotAfter), "cert-manager does not cap a leaf at its CA's expiry")

	t.Log("a Certificate naming an Issuer of another namespace: Ready=False/DoesNotExist, its request Pending")
	other := certificate("other")
	g.Expect(kcp.Client.Create(ctx, other)).To(Succeed())
	g.Eventually(ready(other)).Should(Equal("False/DoesNotExist"))
	g.Eventually(func() []string {
		var reqs certmanagerv1.CertificateRequestList
		g.Expect(kcp.Client.List(ctx, &reqs, client.InNamespace("other"))).To(Succeed())
		var reasons []string
		for _, r := range reqs.Items {
			for _, c := range r.Status.Conditions {
				if c.Type == certmanagerv1.CertificateRequestConditionReady {
					reasons = append(reasons, string(c.Status)+"/"+c.Reason)
				}
			}
		}
		return reasons
	}).Should(Equal([]string{"False/" + certmanagerv1.CertificateRequestReasonPending}))

	t.Log("deleted, a Certificate's requests go (kube-controller-manager's garbage collector); re-created, it is issued again")
	g.Expect(kcp.Client.Delete(ctx, own)).To(Succeed())
	g.Eventually(func() int {
		var reqs certmanagerv1.CertificateRequestList
		g.Expect(kcp.Client.List(ctx, &reqs, client.InNamespace("own"))).To(Succeed())
		return len(reqs.Items)
	}).Should(BeZero())
	g.Expect(kcp.Client.Delete(ctx, secret)).To(Succeed())
	again := certificate("own")
	g.Expect(kcp.Client.Create(ctx, again)).To(Succeed())
	g.Eventually(ready(again)).Should(Equal("True/Ready"))
}
