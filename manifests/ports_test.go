package manifests

import (
	"strconv"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Issue 40: nothing the platform deploys exposes a debug, stats or status
// port beyond what Prometheus scrapes: the gateway's Service carries the
// watcher Gateway's port alone, and each of our Services carries a port the
// pod's prometheus.io/port names or one its NetworkPolicy admits only from
// named peers (the gateway pods) — never a probe or profiling port.
var _ = Describe("exposed ports", func() {
	It("the ingress gateway's Service carries the watcher Gateway's port alone (istio-operator.yaml)", func() {
		var op struct {
			Spec struct {
				Components struct {
					IngressGateways []struct {
						Name string `json:"name"`
						K8s  struct {
							Service struct {
								Ports []corev1.ServicePort `json:"ports"`
							} `json:"service"`
						} `json:"k8s"`
					} `json:"ingressGateways"`
				} `json:"components"`
			} `json:"spec"`
		}
		readYAML("manifests/istio/istio-operator.yaml", &op)
		var gw istionetworkingv1.Gateway
		one(mustBuild("manifests/kcp/base"), "Gateway", "kcp-gateway", &gw)
		want := map[int32]bool{}
		for _, s := range gw.Spec.Servers {
			want[int32(s.GetPort().GetNumber())] = true
		}
		Expect(op.Spec.Components.IngressGateways).To(HaveLen(1))
		ports := op.Spec.Components.IngressGateways[0].K8s.Service.Ports
		Expect(ports).NotTo(BeEmpty(), "without ports the default profile's 80 and 15021 (status) are published")
		for _, p := range ports {
			Expect(want).To(HaveKey(p.Port), "the gateway's Service publishes port %d (%s), which no server of Gateway kcp-gateway uses", p.Port, p.Name)
		}
	})

	for _, dir := range kcpOverlays {
		It("each Service of ours carries a scraped port or one only named peers reach, and no Deployment serves pprof: "+dir, func() {
			objs := mustBuild(dir)
			var deployments []appsv1.Deployment
			for _, u := range find(objs, "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				deployments = append(deployments, d)
				for _, c := range d.Spec.Template.Spec.Containers {
					args := containerArgs(c)
					Expect(args["pprof-bind-address"]).To(Or(BeEmpty(), Equal("0")), "Deployment %s container %s serves /debug/pprof", d.Name, c.Name)
				}
			}
			var policies []networkingv1.NetworkPolicy
			for _, u := range find(objs, "NetworkPolicy", "") {
				var np networkingv1.NetworkPolicy
				decode(u, &np)
				policies = append(policies, np)
			}
			services := find(objs, "Service", "")
			Expect(services).NotTo(BeEmpty())
			for _, u := range services {
				var svc corev1.Service
				decode(u, &svc)
				var d *appsv1.Deployment
				for i := range deployments {
					if deployments[i].Namespace == svc.Namespace && labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(deployments[i].Spec.Template.Labels)) {
						d = &deployments[i]
					}
				}
				Expect(d).NotTo(BeNil(), "Service %s selects no Deployment", svc.Name)
				for _, sp := range svc.Spec.Ports {
					port, name := containerPortOf(d, sp.TargetPort, sp.Port)
					if strconv.Itoa(int(port)) == d.Spec.Template.Annotations["prometheus.io/port"] {
						continue
					}
					Expect(onlyFromPeers(policies, d, port, name)).To(BeTrue(),
						"Service %s port %d reaches %s's port %d (%s), which Prometheus does not scrape and no NetworkPolicy restricts to named peers", svc.Name, sp.Port, d.Name, port, name)
				}
			}
		})
	}
})

// containerPortOf resolves a Service's targetPort (a name, a number, or
// unset: the Service port) to the container port and its name.
func containerPortOf(d *appsv1.Deployment, target intstr.IntOrString, servicePort int32) (int32, string) {
	GinkgoHelper()
	for _, c := range d.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			switch {
			case target.Type == intstr.String && target.StrVal == p.Name,
				target.Type == intstr.Int && target.IntVal == p.ContainerPort,
				target.Type == intstr.Int && target.IntVal == 0 && servicePort == p.ContainerPort:
				return p.ContainerPort, p.Name
			}
		}
	}
	Fail("Deployment " + d.Name + " has no container port " + target.String())
	return 0, ""
}

// onlyFromPeers reports whether a NetworkPolicy selects d's pods and every
// ingress rule of every such policy that admits the port names its peers.
func onlyFromPeers(policies []networkingv1.NetworkPolicy, d *appsv1.Deployment, port int32, name string) bool {
	selected := false
	for _, np := range policies {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		Expect(err).NotTo(HaveOccurred())
		if np.Namespace != d.Namespace || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
			continue
		}
		selected = true
		for _, rule := range np.Spec.Ingress {
			admits := len(rule.Ports) == 0
			for _, p := range rule.Ports {
				if p.Port == nil || p.Port.StrVal == name || (p.Port.Type == intstr.Int && p.Port.IntVal == port) {
					admits = true
				}
			}
			if admits && len(rule.From) == 0 {
				return false
			}
		}
	}
	return selected
}
