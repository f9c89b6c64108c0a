package integration_test

import (
	"context"
	"crypto/x509"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

// Helpers of the specs that run vs-controller with the CA rotation on a KCP
// of their own (the suite's manager runs without it): "Poisoned trust
// store" and "Trust window for Lifecycle Manager's CA".

// runUntilStopped runs start in a goroutine with a context of its own; the
// returned func cancels that context and waits until start has returned,
// which it must without an error.
func runUntilStopped(start func(ctx context.Context) error) func() {
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer GinkgoRecover()
		defer close(stopped)
		Expect(start(ctx)).To(Succeed())
	}()
	return func() {
		cancel()
		Eventually(stopped).Should(BeClosed())
	}
}

// rotationOptions are vs-controller's options with the CA rotation, the
// trust options t, the suite's namespaces, issuer and bundle.
func rotationOptions(t trust.Options) vsmanager.Options {
	return vsmanager.Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0",
		GatewayNamespace: gatewayNS, KymaNamespace: kymaNS,
		Issuer:             cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"},
		Bundle:             bundle.Options{Image: skrImage, KCPAddr: kcpGateway},
		Trust:              t,
		SkipNameValidation: true,
	}
}

// clientCABundle reads the CAs of the gateway's client CA Secret key (its
// ca.crt, which must parse), each as name gives it.
func clientCABundle(ctx context.Context, c client.Client, key types.NamespacedName, name func(*x509.Certificate) string) func(Gomega) []string {
	return func(g Gomega) []string {
		s := &corev1.Secret{}
		g.Expect(c.Get(ctx, key, s)).To(Succeed())
		cs, bad := trust.ParseBundle(s.Data["ca.crt"])
		g.Expect(bad).NotTo(HaveOccurred())
		out := []string{}
		for _, c := range cs {
			out = append(out, name(c))
		}
		return out
	}
}
