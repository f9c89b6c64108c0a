package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// quietPeriod is how long a spec watches for an event that must not come,
// after an event that must come (written later) has already arrived.
const quietPeriod = time.Second

var _ = Describe("Runtime Watcher", Ordered, func() {
	var n sample

	BeforeAll(func(ctx SpecContext) {
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	It("(a) routes a spec change in the SKR to the operator with the right runtime ID", func(ctx SpecContext) {
		since := time.Now()
		kyma := n.watchedKyma("journey-a")
		Expect(env.SKR().Create(ctx, kyma)).To(Succeed())
		Eventually(func() []string { return runtimeIDs(received.For(n.SKRNamespace, "journey-a", since)) }).
			Should(ContainElement(n.RuntimeID))

		since = time.Now()
		Expect(setSpec(ctx, kyma, "changed")).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, "journey-a", since)) }).Should(BeNumerically(">=", 1))
		ev := received.For(n.SKRNamespace, "journey-a", since)[0]
		Expect(ev.RuntimeID).To(Equal(n.RuntimeID))
		Expect(ev.Kind).To(Equal("Kyma"))
	})

	It("(b) does not route metadata-only, status-only or dry-run changes", func(ctx SpecContext) {
		kyma := n.watchedKyma("journey-b")
		Expect(env.SKR().Create(ctx, kyma)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, "journey-b", time.Time{})) }).Should(Equal(1))
		since := time.Now()

		By("changing only an annotation")
		Expect(env.SKR().Get(ctx, client.ObjectKeyFromObject(kyma), kyma)).To(Succeed())
		kyma.SetAnnotations(map[string]string{"touched": "yes"})
		Expect(env.SKR().Update(ctx, kyma)).To(Succeed())

		By("changing only the status")
		Expect(unstructured.SetNestedField(kyma.Object, "Ready", "status", "state")).To(Succeed())
		Expect(env.SKR().Status().Update(ctx, kyma)).To(Succeed())

		By("changing the spec in a dry run")
		Expect(env.SKR().Get(ctx, client.ObjectKeyFromObject(kyma), kyma)).To(Succeed())
		Expect(unstructured.SetNestedField(kyma.Object, "dry", "spec", "data")).To(Succeed())
		Expect(env.SKR().Update(ctx, kyma, client.DryRunAll)).To(Succeed())

		By("then making a real change elsewhere, which must arrive")
		marker := n.watchedKyma("journey-b-marker")
		Expect(env.SKR().Create(ctx, marker)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, "journey-b-marker", since)) }).Should(Equal(1))
		Consistently(func() int { return len(received.For(n.SKRNamespace, "journey-b", since)) }, quietPeriod).Should(BeZero())
	})

	Describe("(c) the edge denies what SAN pinning refuses, and nothing reaches the operator", func() {
		DescribeTable("a client certificate that must be denied",
			func(ctx SpecContext, o pki.LeafOptions, forgeXFCC bool, wantReason contract.DenyReason) {
				cert, err := env.IssueClientCert(o)
				Expect(err).NotTo(HaveOccurred())
				name := "forged-" + string(wantReason)
				since := time.Now()
				body, _ := json.Marshal(contract.WatchEvent{
					Watched:    contract.ObjectKey{Namespace: n.SKRNamespace, Name: name},
					WatchedGvk: contract.GroupVersionKind{Group: v1beta2.GroupVersion.Group, Version: "v1beta2", Kind: "Kyma"},
				})
				req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+contract.EventPath(n.Manager), bytes.NewReader(body))
				Expect(err).NotTo(HaveOccurred())
				req.Header.Set("Content-Type", "application/json")
				req.Header.Set(contract.HeaderRuntimeID, n.RuntimeID) // a client may try; the edge overwrites it
				if forgeXFCC {
					// Claims the real runtime's domain; the gateway must replace it.
					req.Header.Set(contract.HeaderXFCC, fmt.Sprintf(`Hash=00;Subject="CN=%s";DNS=%s`, n.RuntimeID, n.SKRDomain))
				}
				resp, err := env.HTTPClient(&cert).Do(req)
				Expect(err).NotTo(HaveOccurred())
				defer resp.Body.Close()
				respBody, _ := io.ReadAll(resp.Body)
				Expect(resp.StatusCode).To(Equal(http.StatusForbidden), string(respBody))
				Expect(resp.Header.Get(contract.HeaderDenyReason)).To(Equal(string(wantReason)))
				var deny contract.DenyBody
				Expect(json.Unmarshal(respBody, &deny)).To(Succeed())
				Expect(deny.Reason).To(Equal(wantReason))
				Consistently(func() int { return len(received.For(n.SKRNamespace, name, since)) }, quietPeriod).Should(BeZero())
			},
			Entry("SAN does not match the Kyma's skr-domain",
				pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"someone-else.example.com"}}, false, contract.ReasonSANMismatch),
			Entry("runtime unknown to the KCP",
				pki.LeafOptions{CommonName: "runtime-unknown", DNSNames: []string{"skr-unknown.example.com"}}, false, contract.ReasonUnknownRuntime),
			Entry("forged XFCC header claiming the real runtime",
				pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"attacker.example.com"}}, true, contract.ReasonSANMismatch),
		)
	})

	It("(d) keeps SKR writes fast while the KCP gateway is down, and delivers the final state after recovery", func(ctx SpecContext) {
		names := []string{"journey-d-0", "journey-d-1", "journey-d-2"}
		kymas := map[string]*unstructured.Unstructured{}
		for _, name := range names {
			kymas[name] = n.watchedKyma(name)
			Expect(env.SKR().Create(ctx, kymas[name])).To(Succeed())
			Eventually(func() int { return len(received.For(n.SKRNamespace, name, time.Time{})) }).Should(BeNumerically(">=", 1))
		}

		Expect(env.SetGatewayUp(ctx, false)).To(Succeed())
		downSince := time.Now()
		var slowest time.Duration
		for i := range 10 {
			for _, name := range names {
				start := time.Now()
				Expect(setSpec(ctx, kymas[name], fmt.Sprintf("outage-%d", i))).To(Succeed())
				slowest = max(slowest, time.Since(start))
			}
		}
		AddReportEntry("slowest SKR write while the gateway was down", slowest.String())
		Expect(slowest).To(BeNumerically("<", time.Second), "a write waited for the KCP")

		Expect(env.SetGatewayUp(ctx, true)).To(Succeed())
		for _, name := range names {
			Eventually(func() int { return len(received.For(n.SKRNamespace, name, downSince)) }).Should(BeNumerically(">=", 1),
				"the final state of %s was not delivered after the gateway came back", name)
		}
	})

	It("(e) loses no event while the runtime certificate rotates", func(ctx SpecContext) {
		secretKey := client.ObjectKey{Namespace: n.SKRNamespace, Name: "skr-webhook-tls"}
		var before corev1.Secret
		Expect(env.SKR().Get(ctx, secretKey, &before)).To(Succeed())

		By("deleting the runtime Certificate's Secret in the KCP, so cert-manager issues a new one")
		var certs certmanagerv1.CertificateList
		Expect(env.KCP().List(ctx, &certs, client.InNamespace(n.KymaNamespace))).To(Succeed())
		deleted := 0
		for _, c := range certs.Items {
			// Only the runtime's leaf: the runtime CA's Certificate lives in
			// this namespace too, and deleting its Secret would rotate the CA
			// (a new key) under every later spec.
			if c.Spec.IsCA || c.Spec.CommonName != n.RuntimeID {
				continue
			}
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: c.Spec.SecretName, Namespace: n.KymaNamespace}}))).To(Succeed())
			deleted++
		}
		Expect(deleted).To(Equal(1), "runtime Certificates for %s", n.RuntimeID)

		By("writing while the new certificate travels to the SKR and the webhook reloads it")
		since := time.Now()
		var written []string
		rotated := func() bool {
			var now corev1.Secret
			return env.SKR().Get(ctx, secretKey, &now) == nil && !bytes.Equal(now.Data["tls.crt"], before.Data["tls.crt"])
		}
		for i := 0; !rotated() || i < 5; i++ {
			name := fmt.Sprintf("journey-e-%d", i)
			Expect(env.SKR().Create(ctx, n.watchedKyma(name))).To(Succeed())
			written = append(written, name)
			Expect(i).To(BeNumerically("<", 2000), "the certificate never rotated in the SKR")
		}
		for i := range 5 { // and some after the SKR has the new certificate
			name := fmt.Sprintf("journey-e-after-%d", i)
			Expect(env.SKR().Create(ctx, n.watchedKyma(name))).To(Succeed())
			written = append(written, name)
		}
		for _, name := range written {
			Eventually(func() int { return len(received.For(n.SKRNamespace, name, since)) }).Should(BeNumerically(">=", 1), "lost %s", name)
		}
	})

	It("(f) removes the route and the webhook when the Watcher is deleted", func(ctx SpecContext) {
		w := &v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Name: n.WatcherName, Namespace: n.KymaNamespace}}
		Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(w), w)).To(Succeed())
		webhookName := w.WebhookName()
		// Other containers (delivery, module sync, CA rotation) run after
		// this one in random order and need the sample Watcher: put it
		// back, and wait for its route, whatever this spec finds.
		restored := &v1beta2.Watcher{ObjectMeta: metav1.ObjectMeta{Name: w.Name, Namespace: w.Namespace, Labels: w.Labels, Annotations: w.Annotations}, Spec: w.Spec}
		DeferCleanup(func(ctx SpecContext) {
			Eventually(func() error {
				err := env.KCP().Create(ctx, restored.DeepCopy())
				if apierrors.IsAlreadyExists(err) {
					return fmt.Errorf("the deleted Watcher is still there")
				}
				return err
			}).Should(Succeed())
			Eventually(func() error {
				return env.KCP().Get(ctx, client.ObjectKeyFromObject(w), &istionetworkingv1.VirtualService{})
			}).Should(Succeed(), "the restored Watcher's VirtualService")
		})
		Expect(env.KCP().Delete(ctx, w)).To(Succeed())

		Eventually(func() bool {
			err := env.KCP().Get(ctx, client.ObjectKeyFromObject(w), &istionetworkingv1.VirtualService{})
			return apierrors.IsNotFound(err)
		}).Should(BeTrue(), "VirtualService still there")
		Eventually(func() []string {
			var vwc admissionregistrationv1.ValidatingWebhookConfiguration
			if err := env.SKR().Get(ctx, client.ObjectKey{Name: "skr-webhook"}, &vwc); err != nil {
				return nil
			}
			var names []string
			for _, wh := range vwc.Webhooks {
				names = append(names, wh.Name)
			}
			return names
		}).ShouldNot(ContainElement(webhookName))
	})
})

// sample adds helpers to the environment's names.
type sample e2e.Names

// watchedKyma is an SKR Kyma the sample Watcher selects.
func (n sample) watchedKyma(name string) *unstructured.Unstructured {
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	k.SetNamespace(n.SKRNamespace)
	k.SetName(name)
	k.SetLabels(map[string]string{n.WatchedLabel: n.Manager})
	_ = unstructured.SetNestedField(k.Object, "initial", "spec", "data")
	return k
}

func setSpec(ctx context.Context, kyma *unstructured.Unstructured, data string) error {
	patch := []byte(fmt.Sprintf(`{"spec":{"data":%q}}`, data))
	return env.SKR().Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", patch))
}

func runtimeIDs(evs []e2e.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.RuntimeID)
	}
	return out
}
