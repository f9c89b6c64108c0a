package manifests

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	appsv1 "k8s.io/api/apps/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// docs/architecture.md §4.10: ext-authz's gRPC port decides who may post events,
// so only the pods of the Gateway Watchers bind to reach it.
var _ = Describe("the KCP NetworkPolicies", func() {
	for _, dir := range kcpOverlays {
		It("admit ext-authz's gRPC port only from the Gateway's pods: "+dir, func() {
			objs := mustBuild(dir)
			var gw istionetworkingv1.Gateway
			one(objs, "Gateway", "kcp-gateway", &gw)
			var d appsv1.Deployment
			one(objs, "Deployment", "ext-authz", &d)
			var np networkingv1.NetworkPolicy
			one(objs, "NetworkPolicy", "ext-authz", &np)
			Expect(np.Namespace).To(Equal(d.Namespace))
			sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
			Expect(err).NotTo(HaveOccurred())
			Expect(sel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
			Expect(np.Spec.PolicyTypes).To(ContainElement(networkingv1.PolicyTypeIngress))
			grpcRules := 0
			for _, rule := range np.Spec.Ingress {
				for _, p := range rule.Ports {
					Expect(p.Port).NotTo(BeNil(), "a rule without ports opens every port")
					if p.Port.StrVal != "grpc" && p.Port.IntVal != containerPort(container(&d, "ext-authz"), "grpc") {
						continue
					}
					grpcRules++
					Expect(rule.From).To(HaveLen(1))
					Expect(rule.From[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": gw.Namespace}))
					Expect(rule.From[0].PodSelector.MatchLabels).To(Equal(gw.Spec.GetSelector()))
				}
				Expect(rule.Ports).NotTo(BeEmpty(), "a rule without ports opens every port")
			}
			Expect(grpcRules).To(Equal(1))
		})
	}
})
