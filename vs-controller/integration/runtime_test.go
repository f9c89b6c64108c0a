package integration_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"net"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/kubeconfigs"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
)

func newKyma(name, runtimeID, domain string) *unstructured.Unstructured {
	k := &unstructured.Unstructured{}
	k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	k.SetNamespace(kymaNS)
	k.SetName(name)
	if runtimeID != "" {
		k.SetLabels(map[string]string{contract.LabelRuntimeID: runtimeID})
	}
	if domain != "" {
		k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
	}
	k.Object["spec"] = map[string]any{"channel": "regular"}
	return k
}

func kubeconfigSecret(runtimeID string, kubeconfig []byte) *corev1.Secret {
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: skrclient.SecretName(runtimeID)},
		Data:       map[string][]byte{skrclient.SecretKey: kubeconfig},
	}
}

func skrGet(ctx context.Context, obj client.Object, ns, name string) func() error {
	return func() error { return skr.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, obj) }
}

func webhookNames(ctx context.Context) func() ([]string, error) {
	return func() ([]string, error) {
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		if err := skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
			return nil, err
		}
		names := []string{}
		for _, h := range vwc.Webhooks {
			names = append(names, h.Name)
		}
		return names, nil
	}
}

func parseCert(data []byte) *x509.Certificate {
	b, _ := pem.Decode(data)
	ExpectWithOffset(1, b).NotTo(BeNil())
	c, err := x509.ParseCertificate(b.Bytes)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return c
}

func kymaEvents(ctx context.Context, name string) func() []string {
	return func() []string {
		k := newKyma(name, "", "")
		if err := kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k); err != nil {
			return nil
		}
		return reasons(eventsFor(ctx, k))
	}
}

var _ = Describe("Runtime → Certificate and SKR bundle", Ordered, func() {
	const (
		kymaName  = "kyma-sample"
		runtimeID = "runtime-1"
		domain    = "runtime-1.skr.example.com"
	)
	var watcherNS string

	BeforeAll(func(ctx SpecContext) {
		watcherNS = newNamespace(ctx, "runtime-watchers")
		// Two Watchers exist before the runtime.
		Expect(kcp.Client.Create(ctx, newWatcher(watcherNS, "lifecycle-manager", "runtime-lifecycle-manager", map[string]string{"x": "y"}))).To(Succeed())
		status := newWatcher(watcherNS, "status-watcher", "status-operator", map[string]string{"x": "y"})
		status.Spec.Field = v1beta2.StatusField
		status.Spec.LabelsToWatch = nil
		Expect(kcp.Client.Create(ctx, status)).To(Succeed())

		Expect(kcp.Client.Create(ctx, kubeconfigSecret(runtimeID, kubeconfigOf(skr)))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newKyma(kymaName, runtimeID, domain))).To(Succeed())
	})

	It("issues the runtime's Certificate", func(ctx SpecContext) {
		Eventually(func() error { _, err := certificateOf(ctx, runtimeID); return err }).Should(Succeed())
		crt, _ := certificateOf(ctx, runtimeID)
		Expect(crt.Spec.CommonName).To(Equal(runtimeID))
		Expect(crt.Spec.DNSNames).To(Equal([]string{domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"}))
		Expect(crt.Spec.SecretName).To(Equal(runtimeID + "-webhook-tls"))
		Expect(crt.Spec.IssuerRef).To(Equal(cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"}))
		Expect(crt.Spec.Usages).To(ContainElements(certmanagerv1.UsageServerAuth, certmanagerv1.UsageClientAuth))
		kyma := newKyma(kymaName, "", "")
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(kyma), kyma)).To(Succeed())
		Expect(metav1.IsControlledBy(crt, kyma)).To(BeTrue())
		Expect(kyma.GetFinalizers()).To(ContainElement(runtimes.Finalizer))
	})

	It("applies the bundle into the runtime, with one webhook per Watcher", func(ctx SpecContext) {
		Eventually(skrGet(ctx, &corev1.Namespace{}, "", bundle.DefaultNamespace)).Should(Succeed())

		tls := &corev1.Secret{}
		Eventually(skrGet(ctx, tls, bundle.DefaultNamespace, bundle.SecretName)).Should(Succeed())
		Expect(tls.Data[certificates.KeyCA]).To(Equal(ca.PEM))
		leaf := parseCert(tls.Data[certificates.KeyCert])
		Expect(leaf.Subject.CommonName).To(Equal(runtimeID))
		Expect(leaf.DNSNames).To(ContainElements(domain, "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"))
		Expect(tls.Data[certificates.KeyKey]).NotTo(BeEmpty())
		kcpSecret := &corev1.Secret{}
		Expect(kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(runtimeID)}, kcpSecret)).To(Succeed())
		Expect(tls.Data[certificates.KeyKey]).To(Equal(kcpSecret.Data[certificates.KeyKey]), "the SKR gets the issued key pair")

		dep := &appsv1.Deployment{}
		Eventually(skrGet(ctx, dep, bundle.DefaultNamespace, bundle.Name)).Should(Succeed())
		Expect(dep.Spec.Template.Spec.Containers[0].Image).To(Equal(skrImage))
		Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--kcp-addr=" + kcpGateway))
		Expect(dep.Spec.Template.Spec.Volumes[0].Secret.SecretName).To(Equal(bundle.SecretName))
		svc := &corev1.Service{}
		Eventually(skrGet(ctx, svc, bundle.DefaultNamespace, bundle.Name)).Should(Succeed())
		Expect(svc.Spec.Ports[0].Port).To(BeEquivalentTo(443))

		By("confining the webhook pods with a NetworkPolicy (no CNI here: the object only)")
		np := &networkingv1.NetworkPolicy{}
		Eventually(skrGet(ctx, np, bundle.DefaultNamespace, bundle.NetworkPolicyName)).Should(Succeed())
		Expect(labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels).Matches(labels.Set(dep.Spec.Template.Labels))).To(BeTrue())
		Expect(np.Spec.PolicyTypes).To(ConsistOf(networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress))
		Expect(np.Spec.Ingress[0].Ports).To(ConsistOf(HaveField("Port", HaveValue(Equal(svc.Spec.Ports[0].TargetPort)))))
		Expect(np.Spec.Ingress[0].From).To(Equal(webhookIngressFrom), "--skr-webhook-ingress-from")
		Expect(np.Spec.Egress[0].Ports).To(ConsistOf(HaveField("Port", HaveValue(Equal(intstr.FromInt32(443))))), "the KCP gateway's port")
		Expect(np.Labels).NotTo(HaveKey(bundle.LMManagedByLabel))

		Eventually(webhookNames(ctx)).Should(Equal(usableWebhookNames(ctx)))
		_, _, conditions := takeOver(ctx, kymaName)
		Expect(conditions).NotTo(ContainElement(takeover.ConditionTakeOver), "only the Kymas of runtimes LM set up get the take-over condition")
		Expect(usableWebhookNames(ctx)).To(ContainElements(
			watcherNS+".lifecycle-manager.operator.kyma-project.io",
			watcherNS+".status-watcher.operator.kyma-project.io"))
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
		for _, h := range vwc.Webhooks {
			Expect(h.ClientConfig.CABundle).To(Equal(ca.PEM))
			Expect(*h.FailurePolicy).To(Equal(admissionregistrationv1.Ignore))
			Expect(*h.SideEffects).To(Equal(admissionregistrationv1.SideEffectClassNoneOnDryRun))
			Expect(h.ClientConfig.Service.Name).To(Equal(bundle.Name))
			Expect(*h.ClientConfig.Service.Port).To(BeEquivalentTo(443))
			switch h.Name {
			case watcherNS + ".status-watcher.operator.kyma-project.io":
				Expect(h.Rules[0].Resources).To(Equal([]string{"kymas/status"}))
				Expect(*h.ClientConfig.Service.Path).To(Equal("/validate/status-operator"))
			case watcherNS + ".lifecycle-manager.operator.kyma-project.io":
				Expect(h.Rules[0].Resources).To(Equal([]string{"kymas"}))
				Expect(h.ObjectSelector.MatchLabels).To(Equal(map[string]string{"operator.kyma-project.io/watched-by": "runtime-lifecycle-manager"}))
			}
		}
		Eventually(kymaEvents(ctx, kymaName)).Should(ContainElement("Normal/" + runtimes.ReasonBundleApplied))
	})

	It("updates the runtime when Watchers are added, changed and removed", func(ctx SpecContext) {
		w := newWatcher(watcherNS, "added", "added-operator", map[string]string{"x": "y"})
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		name := watcherNS + ".added.operator.kyma-project.io"
		Eventually(webhookNames(ctx)).Should(ContainElement(name))
		Eventually(webhookNames(ctx)).Should(Equal(usableWebhookNames(ctx)))

		By("changing the watched field")
		Expect(kcp.Client.Get(ctx, client.ObjectKeyFromObject(w), w)).To(Succeed())
		base := w.DeepCopy() // a patch: vs-controller writes the Watcher's status meanwhile
		w.Spec.Field = v1beta2.StatusField
		w.Spec.LabelsToWatch = nil
		Expect(kcp.Client.Patch(ctx, w, client.MergeFrom(base))).To(Succeed())
		Eventually(func() (*admissionregistrationv1.ValidatingWebhook, error) {
			vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
			if err := skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc); err != nil {
				return nil, err
			}
			for i := range vwc.Webhooks {
				if vwc.Webhooks[i].Name == name {
					return &vwc.Webhooks[i], nil
				}
			}
			return nil, nil
		}).Should(And(
			HaveField("Rules", ContainElement(HaveField("Rule.Resources", []string{"kymas/status"}))),
			// labelsToWatch removed: the selector we set is gone (the API
			// server defaults an empty one).
			HaveField("ObjectSelector.MatchLabels", BeEmpty()),
		))

		By("deleting the Watcher")
		Expect(kcp.Client.Delete(ctx, w)).To(Succeed())
		Eventually(webhookNames(ctx)).ShouldNot(ContainElement(name))
		Eventually(webhookNames(ctx)).Should(Equal(usableWebhookNames(ctx)))
	})

	// A webhook configuration written by anyone else (a restore from a
	// copy: a create, another field manager) is co-owned by that manager,
	// and server-side apply keeps a webhook vs-controller no longer applies.
	// The e2e at 53b29bc kept a deleted Watcher's webhook after the
	// watch-path health specs had deleted the configuration and restored
	// it from a copy.
	It("removes a deleted Watcher's webhook from the runtime even after someone else wrote the configuration", func(ctx SpecContext) {
		w := newWatcher(watcherNS, "restored", "restored-operator", map[string]string{"x": "y"})
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		name := watcherNS + ".restored.operator.kyma-project.io"
		Eventually(webhookNames(ctx)).Should(ContainElement(name))

		By("restoring the configuration from a copy, as a backup restore or kubectl replace --force does")
		vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc)).To(Succeed())
		Expect(skr.Client.Delete(ctx, vwc.DeepCopy())).To(Succeed())
		vwc.ResourceVersion, vwc.UID, vwc.CreationTimestamp, vwc.ManagedFields = "", "", metav1.Time{}, nil
		Expect(client.IgnoreAlreadyExists(skr.Client.Create(ctx, vwc, client.FieldOwner("restore")))).To(Succeed())

		By("deleting the Watcher")
		Expect(kcp.Client.Delete(ctx, w)).To(Succeed())
		Eventually(webhookNames(ctx)).ShouldNot(ContainElement(name))
		Eventually(webhookNames(ctx)).Should(Equal(usableWebhookNames(ctx)))
	})

	// Issue 24: a Watcher in another namespace claiming the route of an
	// existing manager, watching everything, would send every write of the
	// runtime to the owner's listener.
	It("gives a Watcher that lost its route no webhook in the runtime, and says so", Label("adversary"), func(ctx SpecContext) {
		suffix := rand.String(5)
		sel := map[string]string{"gateway-set": "claimed-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("claimed-"+suffix, sel, "claimed.example.com"))).To(Succeed())
		manager := "claimed-operator-" + suffix
		owner := newWatcher(watcherNS, "route-owner", manager, sel)
		Expect(kcp.Client.Create(ctx, owner)).To(Succeed())
		ownerHook := watcherNS + ".route-owner.operator.kyma-project.io"
		Eventually(webhookNames(ctx)).Should(ContainElement(ownerHook))

		thiefNS := newNamespace(ctx, "team-x")
		thief := newWatcher(thiefNS, "everything", manager, sel)
		thief.Spec.ResourceToWatch = v1beta2.WatchableGVR{Group: "*", Version: "*", Resource: "*"}
		thief.Spec.LabelsToWatch = nil
		Eventually(func() bool { return time.Now().Truncate(time.Second).After(owner.CreationTimestamp.Time) }).
			WithTimeout(3 * time.Second).Should(BeTrue())
		Expect(kcp.Client.Create(ctx, thief)).To(Succeed())
		Eventually(watcherStatus(ctx, client.ObjectKeyFromObject(thief))).Should(HaveField("Conditions", ContainElement(And(
			HaveField("Type", routeowner.ConditionVirtualService),
			HaveField("Reason", routeowner.ReasonRouteConflict),
			HaveField("Message", ContainSubstring("no webhook in any runtime")),
		))))
		// The runtime is reconciled after the thief exists (a later Watcher
		// change): its webhook must still be absent.
		other := newWatcher(watcherNS, "later", "later-operator-"+suffix, map[string]string{"x": "y"})
		Expect(kcp.Client.Create(ctx, other)).To(Succeed())
		Eventually(webhookNames(ctx)).Should(ContainElement(watcherNS + ".later.operator.kyma-project.io"))
		Expect(webhookNames(ctx)()).To(And(
			ContainElement(ownerHook), Not(ContainElement(thiefNS+".everything.operator.kyma-project.io"))))

		By("handing the route, and the webhook, over when the owner goes")
		Expect(kcp.Client.Delete(ctx, owner)).To(Succeed())
		Eventually(webhookNames(ctx)).Should(And(
			ContainElement(thiefNS+".everything.operator.kyma-project.io"), Not(ContainElement(ownerHook))))
		Expect(kcp.Client.Delete(ctx, thief)).To(Succeed())
		Expect(kcp.Client.Delete(ctx, other)).To(Succeed())
		Eventually(webhookNames(ctx)).Should(Equal(usableWebhookNames(ctx)))
	})

	// Issue 33: the loser of a route conflict writes its own status
	// (watchers/status) to claim the route; whether it holds one comes from
	// vs-controller's VirtualServices alone, and routing puts its condition
	// back.
	It("gives a Watcher that lost its route no webhook even when it forges its status, and puts the status back", Label("adversary"), func(ctx SpecContext) {
		suffix := rand.String(5)
		sel := map[string]string{"gateway-set": "forged-" + suffix}
		Expect(kcp.Client.Create(ctx, newGateway("forged-"+suffix, sel, "forged.example.com"))).To(Succeed())
		manager := "forged-operator-" + suffix
		owner := newWatcher(watcherNS, "forged-owner", manager, sel)
		Expect(kcp.Client.Create(ctx, owner)).To(Succeed())
		ownerHook := watcherNS + ".forged-owner.operator.kyma-project.io"
		Eventually(webhookNames(ctx)).Should(ContainElement(ownerHook))

		thiefNS := newNamespace(ctx, "team-f")
		thief := newWatcher(thiefNS, "forger", manager, sel)
		thiefHook := thiefNS + ".forger.operator.kyma-project.io"
		Eventually(func() bool { return time.Now().Truncate(time.Second).After(owner.CreationTimestamp.Time) }).
			WithTimeout(3 * time.Second).Should(BeTrue())
		Expect(kcp.Client.Create(ctx, thief)).To(Succeed())
		Eventually(watcherStatus(ctx, client.ObjectKeyFromObject(thief))).Should(HaveField("Conditions", ContainElement(
			HaveField("Reason", routeowner.ReasonRouteConflict))))

		By("forging VirtualServiceReady=True for the current generation, again and again")
		forge := func(ctx context.Context) error {
			w := &v1beta2.Watcher{}
			if err := kcp.Client.Get(ctx, client.ObjectKeyFromObject(thief), w); err != nil {
				return err
			}
			base := w.DeepCopy()
			meta.SetStatusCondition(&w.Status.Conditions, metav1.Condition{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionTrue,
				Reason: routeowner.ReasonApplied, Message: "forged", ObservedGeneration: w.Generation})
			w.Status.State = v1beta2.StateReady
			return kcp.Client.Status().Patch(ctx, w, client.MergeFrom(base))
		}
		Expect(forge(ctx)).To(Succeed())
		forging, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			for forging.Err() == nil {
				_ = forge(forging) // routing puts it back; the forger insists
			}
		}()
		// Runtime passes while the forgery stands (other Watchers'
		// changes) must not give the forger a webhook.
		for i := range 3 {
			later := newWatcher(watcherNS, fmt.Sprintf("after-forgery-%d", i), fmt.Sprintf("after-forgery-%d-%s", i, suffix), map[string]string{"x": "y"})
			Expect(kcp.Client.Create(ctx, later)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(kcp.Client.Delete(ctx, later))).To(Succeed()) })
			Eventually(webhookNames(ctx)).Should(ContainElement(later.WebhookName()))
			Expect(webhookNames(ctx)()).To(And(ContainElement(ownerHook), Not(ContainElement(thiefHook))))
		}
		Consistently(webhookNames(ctx)).WithTimeout(2 * time.Second).Should(Not(ContainElement(thiefHook)))
		stop()
		<-done
		Eventually(watcherStatus(ctx, client.ObjectKeyFromObject(thief))).Should(HaveField("Conditions", ContainElement(And(
			HaveField("Type", routeowner.ConditionVirtualService), HaveField("Status", metav1.ConditionFalse),
			HaveField("Reason", routeowner.ReasonRouteConflict)))))

		for _, w := range []*v1beta2.Watcher{thief, owner} {
			Expect(kcp.Client.Delete(ctx, w)).To(Succeed())
		}
	})

	// Issue 33: module-sync's RBAC read every Secret in kcp-system. Now
	// vs-controller keeps the Role module-sync-kubeconfigs to get on
	// exactly the Kymas' kubeconfig Secrets, and module-sync (bound to it as
	// manifests/kcp/base/module-sync-rbac.yaml binds it) reads nothing else.
	It("lets module-sync read only the runtimes' kubeconfig Secrets (Role module-sync-kubeconfigs)", Label("adversary"), func(ctx SpecContext) {
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: kubeconfigs.RoleName, Namespace: kymaNS},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: kubeconfigs.RoleName},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "module-sync", Namespace: kymaNS}}}
		Expect(client.IgnoreAlreadyExists(kcp.Client.Create(ctx, binding))).To(Succeed())
		can := func(verb, name string) bool {
			GinkgoHelper()
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: "system:serviceaccount:" + kymaNS + ":module-sync", Groups: []string{"system:serviceaccounts", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: kymaNS, Verb: verb, Resource: "secrets", Name: name}}}
			Expect(kcp.Client.Create(ctx, sar)).To(Succeed())
			return sar.Status.Allowed
		}
		Eventually(func() bool { return can("get", skrclient.SecretName(runtimeID)) }).Should(BeTrue())
		Expect(can("get", issuerName)).To(BeFalse(), "another Secret of kcp-system")
		Expect(can("get", runtimeID+"-webhook-tls")).To(BeFalse(), "the runtime certificate's Secret")
		Expect(can("list", "")).To(BeFalse())
		Expect(can("watch", "")).To(BeFalse())

		By("a new Kyma's kubeconfig becomes readable, a removed one's not; an edit of the Role is repaired")
		other := newKyma("kyma-kubeconfig-rbac", "runtime-kubeconfig-rbac", "")
		Expect(kcp.Client.Create(ctx, other)).To(Succeed())
		Eventually(func() bool { return can("get", skrclient.SecretName("runtime-kubeconfig-rbac")) }).Should(BeTrue())
		role := &rbacv1.Role{}
		Expect(kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: kubeconfigs.RoleName}, role)).To(Succeed())
		role.Rules = append(role.Rules, rbacv1.PolicyRule{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "list"}})
		Expect(kcp.Client.Update(ctx, role)).To(Succeed())
		Eventually(func() bool { return can("list", "") }).Should(BeFalse())
		Expect(kcp.Client.Delete(ctx, other)).To(Succeed())
		Eventually(func() bool { return can("get", skrclient.SecretName("runtime-kubeconfig-rbac")) }).Should(BeFalse())
		Expect(can("get", skrclient.SecretName(runtimeID))).To(BeTrue())
	})

	It("re-applies a rotated certificate", func(ctx SpecContext) {
		old := &corev1.Secret{}
		Expect(skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, old)).To(Succeed())

		By("asking for a re-issue, as `cmctl renew` does")
		crt, err := certificateOf(ctx, runtimeID)
		Expect(err).NotTo(HaveOccurred())
		base := crt.DeepCopy() // a patch: cert-manager may write the status meanwhile
		crt.Status.Conditions = append(crt.Status.Conditions, certmanagerv1.CertificateCondition{
			Type: certmanagerv1.CertificateConditionIssuing, Status: cmmeta.ConditionTrue, Reason: "ManuallyTriggered",
		})
		Expect(kcp.Client.Status().Patch(ctx, crt, client.MergeFrom(base))).To(Succeed())

		Eventually(func() ([]byte, error) {
			s := &corev1.Secret{}
			err := skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, s)
			return s.Data[certificates.KeyCert], err
		}).ShouldNot(Equal(old.Data[certificates.KeyCert]))
		kcpSecret := &corev1.Secret{}
		Expect(kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(runtimeID)}, kcpSecret)).To(Succeed())
		Eventually(func() ([]byte, error) {
			s := &corev1.Secret{}
			err := skr.Client.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName}, s)
			return s.Data[certificates.KeyKey], err
		}).Should(Equal(kcpSecret.Data[certificates.KeyKey]))
	})

	It("reports an unreachable runtime in the Kyma's Events without blocking the others", func(ctx SpecContext) {
		// A kubeconfig pointing at a port nothing listens on.
		l, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := l.Addr().String()
		Expect(l.Close()).To(Succeed())
		cfg, err := clientcmd.Load(kubeconfigOf(skr))
		Expect(err).NotTo(HaveOccurred())
		for _, c := range cfg.Clusters {
			c.Server = "https://" + addr
		}
		dead, err := clientcmd.Write(*cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcp.Client.Create(ctx, kubeconfigSecret("runtime-dead", dead))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newKyma("runtime-dead", "", "runtime-dead.skr.example.com"))).To(Succeed())
		Eventually(kymaEvents(ctx, "runtime-dead")).Should(ContainElement("Warning/" + runtimes.ReasonUnreachable))

		By("still updating the reachable runtime")
		w := newWatcher(watcherNS, "while-dead", "while-dead-operator", map[string]string{"x": "y"})
		Expect(kcp.Client.Create(ctx, w)).To(Succeed())
		Eventually(webhookNames(ctx)).Should(ContainElement(watcherNS + ".while-dead.operator.kyma-project.io"))

		By("deleting the dead runtime: without its kubeconfig the bundle is left in place")
		Expect(kcp.Client.Delete(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: skrclient.SecretName("runtime-dead")}})).To(Succeed())
		dk := newKyma("runtime-dead", "", "")
		Expect(kcp.Client.Delete(ctx, dk)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(dk), dk)) }).Should(BeTrue())
		Eventually(func() bool {
			_, err := certificateOf(ctx, "runtime-dead")
			return apierrors.IsNotFound(err)
		}).Should(BeTrue())
	})

	It("refuses a kubeconfig that would run a command in the controller", func(ctx SpecContext) {
		cfg, err := clientcmd.Load(kubeconfigOf(skr))
		Expect(err).NotTo(HaveOccurred())
		for _, a := range cfg.AuthInfos {
			a.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh", InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
		}
		evil, err := clientcmd.Write(*cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcp.Client.Create(ctx, kubeconfigSecret("runtime-exec", evil))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newKyma("runtime-exec", "", "runtime-exec.skr.example.com"))).To(Succeed())
		Eventually(kymaEvents(ctx, "runtime-exec")).Should(ContainElement("Warning/" + runtimes.ReasonInvalidKubeconfig))

		By("deleting that Kyma all the same")
		k := newKyma("runtime-exec", "", "")
		Expect(kcp.Client.Delete(ctx, k)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)) }).Should(BeTrue())
	})

	It("refuses a kubeconfig that skips TLS verification (without --allow-insecure-skr)", Label("bounds"), func(ctx SpecContext) {
		cfg, err := clientcmd.Load(kubeconfigOf(skr))
		Expect(err).NotTo(HaveOccurred())
		for _, c := range cfg.Clusters {
			c.CertificateAuthorityData = nil
			c.InsecureSkipTLSVerify = true
		}
		insecure, err := clientcmd.Write(*cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcp.Client.Create(ctx, kubeconfigSecret("runtime-insecure", insecure))).To(Succeed())
		Expect(kcp.Client.Create(ctx, newKyma("runtime-insecure", "", "runtime-insecure.skr.example.com"))).To(Succeed())
		Eventually(kymaEvents(ctx, "runtime-insecure")).Should(ContainElement("Warning/" + runtimes.ReasonInvalidKubeconfig))
		Eventually(func() []string {
			var list corev1.EventList
			Expect(kcp.Client.List(ctx, &list, client.InNamespace(kymaNS))).To(Succeed())
			var msgs []string
			for _, e := range list.Items {
				if e.InvolvedObject.Name == "runtime-insecure" {
					msgs = append(msgs, e.Message)
				}
			}
			return msgs
		}).Should(ContainElement(ContainSubstring("insecure-skip-tls-verify")))

		k := newKyma("runtime-insecure", "", "")
		Expect(kcp.Client.Delete(ctx, k)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(k), k)) }).Should(BeTrue())
	})

	It("removes the bundle and the Certificate when the Kyma is deleted", func(ctx SpecContext) {
		kyma := newKyma(kymaName, "", "")
		Expect(kcp.Client.Delete(ctx, kyma)).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(kcp.Client.Get(ctx, client.ObjectKeyFromObject(kyma), kyma)) }).Should(BeTrue())

		notFound := func(obj client.Object, ns, name string) func() bool {
			return func() bool { return apierrors.IsNotFound(skrGet(ctx, obj, ns, name)()) }
		}
		Expect(notFound(&admissionregistrationv1.ValidatingWebhookConfiguration{}, "", bundle.Name)()).To(BeTrue())
		Expect(notFound(&appsv1.Deployment{}, bundle.DefaultNamespace, bundle.Name)()).To(BeTrue())
		Expect(notFound(&corev1.Service{}, bundle.DefaultNamespace, bundle.Name)()).To(BeTrue())
		Expect(notFound(&corev1.Secret{}, bundle.DefaultNamespace, bundle.SecretName)()).To(BeTrue())
		Expect(notFound(&networkingv1.NetworkPolicy{}, bundle.DefaultNamespace, bundle.NetworkPolicyName)()).To(BeTrue())
		Expect(skrGet(ctx, &corev1.Namespace{}, "", bundle.DefaultNamespace)()).To(Succeed(), "the shared namespace stays")

		_, err := certificateOf(ctx, runtimeID)
		Expect(apierrors.IsNotFound(err)).To(BeTrue())
		err = kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(runtimeID)}, &corev1.Secret{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue())
	})
})
