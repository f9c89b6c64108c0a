package manifests

import (
	"fmt"
	"net"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/protobuf/encoding/protojson"
	meshv1alpha1 "istio.io/api/mesh/v1alpha1"
	istioapinetworking "istio.io/api/networking/v1"
	istioapisecurity "istio.io/api/security/v1beta1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// kcpOverlays are the KCP kustomizations a platform team deploys (the base
// with its placeholders is consistent on its own, too).
var kcpOverlays = []string{"manifests/kcp/base", "manifests/kcp/overlays/production", "manifests/kcp/overlays/kind"}

// workloadBuilds hold Deployments.
var workloadBuilds = append(append([]string{}, kcpOverlays...), "manifests/samples", "manifests/skr")

// readYAML decodes a YAML file of the repository into out.
func readYAML(rel string, out any) {
	GinkgoHelper()
	b, err := os.ReadFile(repoPath(rel))
	Expect(err).NotTo(HaveOccurred())
	Expect(sigsyaml.Unmarshal(b, out)).To(Succeed(), rel)
}

// containerArgs returns a container's --flag=value arguments with $(VAR)
// expanded from its env as the kubelet does; a flag without a value maps
// to "true".
func containerArgs(c corev1.Container) map[string]string {
	GinkgoHelper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.FieldRef != nil:
			// The kubelet fills it from the pod (the downward API) before it
			// expands the arguments: a placeholder of the field.
			env[e.Name] = "pod-" + strings.ReplaceAll(e.ValueFrom.FieldRef.FieldPath, ".", "-")
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	args := map[string]string{}
	for _, a := range c.Args {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			Expect(env).To(HaveKey(m[1]), "container %s: %s refers to an env var with no value", c.Name, a)
		}
		a = ref.ReplaceAllStringFunc(a, func(s string) string { return env[ref.FindStringSubmatch(s)[1]] })
		Expect(a).To(HavePrefix("--"), "container %s: argument %q", c.Name, a)
		k, v, ok := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !ok {
			v = "true"
		}
		args[k] = v
	}
	return args
}

func container(d *appsv1.Deployment, name string) corev1.Container {
	GinkgoHelper()
	for _, c := range d.Spec.Template.Spec.Containers {
		if c.Name == name {
			return c
		}
	}
	Fail(fmt.Sprintf("Deployment %s has no container %s", d.Name, name))
	return corev1.Container{}
}

func containerPort(c corev1.Container, name string) int32 {
	GinkgoHelper()
	for _, p := range c.Ports {
		if p.Name == name {
			return p.ContainerPort
		}
	}
	Fail(fmt.Sprintf("container %s has no port %q", c.Name, name))
	return 0
}

// addrPort is the port of a ":9001"-style listen address.
func addrPort(addr string) int32 {
	GinkgoHelper()
	_, p, err := net.SplitHostPort(addr)
	Expect(err).NotTo(HaveOccurred(), addr)
	n, err := strconv.Atoi(p)
	Expect(err).NotTo(HaveOccurred(), addr)
	return int32(n)
}

// meshConfig is manifests/istio/istiod-values.yaml's meshConfig, parsed
// strictly as Istio's MeshConfig (an unknown or misspelled field fails).
func meshConfig() (*meshv1alpha1.MeshConfig, map[string]any) {
	GinkgoHelper()
	var values struct {
		MeshConfig map[string]any `json:"meshConfig"`
	}
	readYAML("manifests/istio/istiod-values.yaml", &values)
	Expect(values.MeshConfig).NotTo(BeEmpty())
	return parseMesh(values.MeshConfig), values.MeshConfig
}

func parseMesh(m map[string]any) *meshv1alpha1.MeshConfig {
	GinkgoHelper()
	b, err := sigsyaml.Marshal(m)
	Expect(err).NotTo(HaveOccurred())
	j, err := sigsyaml.YAMLToJSON(b)
	Expect(err).NotTo(HaveOccurred())
	mc := &meshv1alpha1.MeshConfig{}
	Expect(protojson.UnmarshalOptions{DiscardUnknown: false}.Unmarshal(j, mc)).To(Succeed())
	return mc
}

// kindSettings are the values of the kind overlay's settings ConfigMap.
func overlaySettings(overlay string) map[string]string {
	GinkgoHelper()
	var cm corev1.ConfigMap
	readYAML(overlay+"/settings.yaml", &cm)
	Expect(cm.Name).To(Equal("runtime-watcher-settings"))
	return cm.Data
}

var _ = Describe("the KCP manifests", func() {
	for _, dir := range kcpOverlays {
		Context(dir, func() {
			var objs []*unstructured.Unstructured
			BeforeEach(func() { objs = mustBuild(dir) })

			It("terminate mTLS at the Gateway that Watchers select, with a certificate for its host", func() {
				var gw istionetworkingv1.Gateway
				one(objs, "Gateway", "kcp-gateway", &gw)
				Expect(gw.Labels).To(HaveKeyWithValue("operator.kyma-project.io/watcher-gateway", "default"))
				Expect(gw.Spec.Servers).To(HaveLen(1))
				s := gw.Spec.Servers[0]
				Expect(s.GetPort().GetProtocol()).To(Equal("HTTPS"))
				Expect(s.GetTls().GetMode()).To(Equal(istioapinetworking.ServerTLSSettings_MUTUAL))
				Expect(s.GetHosts()).To(HaveLen(1))

				var cert certmanagerv1.Certificate
				one(objs, "Certificate", s.GetTls().GetCredentialName(), &cert)
				Expect(cert.Namespace).To(Equal(gw.Namespace), "Istio reads credentialName from the gateway's namespace")
				Expect(cert.Spec.SecretName).To(Equal(s.GetTls().GetCredentialName()))
				Expect(cert.Spec.DNSNames).To(ConsistOf(s.GetHosts()[0]))
				Expect(cert.Spec.Usages).To(ContainElement(certmanagerv1.UsageServerAuth))
				Expect(cert.Spec.IssuerRef.Kind).To(Equal("Issuer"))
				Expect(cert.Spec.IssuerRef.Name).To(Equal("kcp-gateway-ca"),
					"the gateway has its own CA, whose bundle vs-controller puts into every SKR's ca.crt")
			})

			It("send every request on the ingress gateway to ext-authz, fail closed (AuthorizationPolicy CUSTOM + mesh config)", func() {
				var gw istionetworkingv1.Gateway
				one(objs, "Gateway", "kcp-gateway", &gw)
				var ap istiosecurityv1.AuthorizationPolicy
				one(objs, "AuthorizationPolicy", "runtime-watcher-ext-authz", &ap)
				Expect(ap.Namespace).To(Equal(gw.Namespace))
				Expect(ap.Spec.GetAction()).To(Equal(istioapisecurity.AuthorizationPolicy_CUSTOM))
				Expect(ap.Spec.GetSelector().GetMatchLabels()).To(Equal(gw.Spec.GetSelector()),
					"the policy must apply to the very gateway pods that serve the Gateway")
				// One empty rule matches every request: no path, source or
				// condition exempts a request from ext-authz.
				Expect(ap.Spec.GetRules()).To(HaveLen(1))
				Expect(ap.Spec.GetRules()[0].GetFrom()).To(BeEmpty(), "a source condition would exempt other sources from ext-authz")
				Expect(ap.Spec.GetRules()[0].GetTo()).To(BeEmpty(), "an operation condition would exempt other paths from ext-authz")
				Expect(ap.Spec.GetRules()[0].GetWhen()).To(BeEmpty())

				mc, _ := meshConfig()
				var provider *meshv1alpha1.MeshConfig_ExtensionProvider
				for _, p := range mc.GetExtensionProviders() {
					if p.GetName() == ap.Spec.GetProvider().GetName() {
						provider = p
					}
				}
				Expect(provider).NotTo(BeNil(), "mesh config declares no extension provider %q", ap.Spec.GetProvider().GetName())
				grpc := provider.GetEnvoyExtAuthzGrpc()
				Expect(grpc).NotTo(BeNil(), "the provider must be envoyExtAuthzGrpc")
				Expect(grpc.GetFailOpen()).To(BeFalse())
				Expect(grpc.GetTimeout().AsDuration()).To(And(BeNumerically(">", 0), BeNumerically("<=", time.Second)))
				status, err := strconv.Atoi(grpc.GetStatusOnError())
				Expect(err).NotTo(HaveOccurred(), "statusOnError %q", grpc.GetStatusOnError())
				Expect(status).To(And(BeNumerically(">=", 500), BeNumerically("<", 600)),
					"an unreachable ext-authz must answer 5xx so that the SKR webhook retries")

				var svc corev1.Service
				one(objs, "Service", "ext-authz", &svc)
				Expect(grpc.GetService()).To(Equal(fmt.Sprintf("%s.%s.svc.cluster.local", svc.Name, svc.Namespace)))
				var port *corev1.ServicePort
				for i := range svc.Spec.Ports {
					if svc.Spec.Ports[i].Port == int32(grpc.GetPort()) {
						port = &svc.Spec.Ports[i]
					}
				}
				Expect(port).NotTo(BeNil(), "Service ext-authz has no port %d", grpc.GetPort())
				Expect(port.Name).To(Equal("grpc"))
				Expect(port.AppProtocol).To(HaveValue(Equal("grpc")), "Istio must speak HTTP/2 to ext-authz")

				var d appsv1.Deployment
				one(objs, "Deployment", "ext-authz", &d)
				c := container(&d, "ext-authz")
				Expect(port.TargetPort).To(Equal(intstr.FromString("grpc")))
				Expect(addrPort(containerArgs(c)["grpc-addr"])).To(Equal(containerPort(c, "grpc")))
				Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
			})

			It("route the health reports (contract.HealthPath) on the Gateway to vs-controller's --health-report-bind-address, reachable from the gateway pods only", func() {
				var vs istionetworkingv1.VirtualService
				one(objs, "VirtualService", "runtime-watcher-health", &vs)
				var gw istionetworkingv1.Gateway
				one(objs, "Gateway", "kcp-gateway", &gw)
				Expect(vs.Spec.Gateways).To(Equal([]string{gw.Namespace + "/" + gw.Name}))
				Expect(vs.Spec.Http).To(HaveLen(1))
				route := vs.Spec.Http[0]
				Expect(route.Match).To(HaveLen(1))
				Expect(route.Match[0].Uri.GetExact()).To(Equal(contract.HealthPath))
				Expect(route.Route).To(HaveLen(1))
				dest := route.Route[0].Destination

				var svc corev1.Service
				one(objs, "Service", "vs-controller-health", &svc)
				Expect(dest.Host).To(Equal(svc.Name + "." + svc.Namespace + ".svc.cluster.local"))
				Expect(svc.Spec.Ports).To(HaveLen(1))
				Expect(dest.Port.GetNumber()).To(BeEquivalentTo(svc.Spec.Ports[0].Port))
				var d appsv1.Deployment
				one(objs, "Deployment", "vs-controller", &d)
				Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
				c := container(&d, "vs-controller")
				port := addrPort(containerArgs(c)["health-report-bind-address"])
				Expect(containerPort(c, svc.Spec.Ports[0].TargetPort.StrVal)).To(Equal(port))

				// vs-controller trusts x-watcher-runtime-id on that port.
				var np networkingv1.NetworkPolicy
				one(objs, "NetworkPolicy", "vs-controller", &np)
				admitted := false
				for _, rule := range np.Spec.Ingress {
					for _, p := range rule.Ports {
						if p.Port != nil && (p.Port.StrVal == svc.Spec.Ports[0].TargetPort.StrVal || p.Port.IntVal == port) {
							admitted = true
							Expect(rule.From).To(HaveLen(1))
							Expect(rule.From[0].NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": gw.Namespace}))
							Expect(rule.From[0].PodSelector.MatchLabels).To(Equal(gw.Spec.GetSelector()))
						}
					}
				}
				Expect(admitted).To(BeTrue(), "the NetworkPolicy does not admit the gateway to the health port")
			})

			It("point vs-controller at the Gateway's host and namespace, the Kyma namespace and the CA issuer", func() {
				var d appsv1.Deployment
				one(objs, "Deployment", "vs-controller", &d)
				c := container(&d, "vs-controller")
				args := containerArgs(c)

				var gw istionetworkingv1.Gateway
				one(objs, "Gateway", "kcp-gateway", &gw)
				Expect(args["gateway-namespace"]).To(Equal(gw.Namespace))
				host, _, err := net.SplitHostPort(args["kcp-gateway-host"])
				if err != nil {
					host = args["kcp-gateway-host"] // no port: 443
				}
				Expect(host).To(Equal(gw.Spec.Servers[0].GetHosts()[0]), "SKR webhooks must reach the Gateway's host")
				Expect(args).To(HaveKeyWithValue("leader-elect", "true"))

				Expect(args["kyma-namespace"]).To(Equal(localenv.KymaNamespace))
				var ea appsv1.Deployment
				one(objs, "Deployment", "ext-authz", &ea)
				Expect(containerArgs(container(&ea, "ext-authz"))["kyma-namespace"]).To(Equal(args["kyma-namespace"]))
				for _, r := range find(objs, "Role", "") {
					Expect(r.GetNamespace()).To(BeElementOf(args["kyma-namespace"], gw.Namespace), "Role %s", r.GetName())
				}

				// docs/architecture.md §4.9: runtime identities come from a
				// namespaced CA Issuer in vs-controller's namespace; the
				// gateway's server certificate from its own CA.
				Expect(args["issuer-kind"]).To(Equal("Issuer"))
				Expect(find(objs, "ClusterIssuer", "")).To(BeEmpty(), "a ClusterIssuer would let any namespace mint certificates")
				var ca certmanagerv1.Issuer
				oneIn(objs, "Issuer", args["kyma-namespace"], args["issuer-name"], &ca)
				Expect(ca.Spec.CA).NotTo(BeNil(), "vs-controller's issuer must be the CA issuer")
				var caCert certmanagerv1.Certificate
				oneIn(objs, "Certificate", args["kyma-namespace"], ca.Spec.CA.SecretName, &caCert)
				Expect(caCert.Spec.IsCA).To(BeTrue())
				Expect(caCert.Spec.SecretName).To(Equal(ca.Spec.CA.SecretName))
				Expect(caCert.Spec.PrivateKey.RotationPolicy).To(Equal(certmanagerv1.RotationPolicyAlways), "a CA rotation brings a new key")
				Expect(args["ca-secret"]).To(Equal(args["kyma-namespace"] + "/" + caCert.Spec.SecretName))

				server := gw.Spec.Servers[0].GetTls().GetCredentialName()
				var gwCert certmanagerv1.Certificate
				oneIn(objs, "Certificate", gw.Namespace, server, &gwCert)
				Expect(gwCert.Spec.IssuerRef.Kind).To(Equal("Issuer"))
				Expect(gwCert.Spec.IssuerRef.Name).NotTo(Equal(args["issuer-name"]), "the gateway's server certificate has its own CA")
				Expect(args["gateway-certificate"]).To(Equal(gw.Namespace + "/" + gwCert.Name))
				Expect(args["gateway-client-ca-secret"]).To(Equal(gw.Namespace+"/"+server+"-cacert"), "Istio reads the client CA of a MUTUAL server from <credentialName>-cacert")
				// Issue 40: ext-authz checks the chain against the same
				// client trust, mirrored by vs-controller into its namespace.
				eaArgs := containerArgs(container(&ea, "ext-authz"))
				Expect(eaArgs).To(HaveKey("ca-file"), "ext-authz refuses a certificate of another CA a second time")
				var clientCAVolume string
				for _, m := range container(&ea, "ext-authz").VolumeMounts {
					if strings.HasPrefix(eaArgs["ca-file"], m.MountPath+"/") {
						clientCAVolume = m.Name
					}
				}
				Expect(clientCAVolume).NotTo(BeEmpty(), "ext-authz's --ca-file %s is on no volume", eaArgs["ca-file"])
				for _, v := range ea.Spec.Template.Spec.Volumes {
					if v.Name == clientCAVolume {
						Expect(v.ConfigMap).NotTo(BeNil(), "ext-authz's --ca-file volume must be the ConfigMap vs-controller writes")
						Expect(v.ConfigMap.Name).To(Equal(args["trust-store"]+trust.ClientCAConfigMapSuffix), "vs-controller writes <--trust-store>%s", trust.ClientCAConfigMapSuffix)
						Expect(v.ConfigMap.Optional == nil || !*v.ConfigMap.Optional).To(BeTrue(), "without the ConfigMap ext-authz must not start (fail closed)")
						Expect(path.Base(eaArgs["ca-file"])).To(Equal("ca.crt"))
					}
				}
				// The route policy names the same Gateway (its variables
				// gwNamespace and gwName), and the route writer role binds
				// only it.
				var vap admissionregistrationv1.ValidatingAdmissionPolicy
				one(objs, "ValidatingAdmissionPolicy", "watcher-gateway-routes.operator.kyma-project.io", &vap)
				vars := map[string]string{}
				for _, v := range vap.Spec.Variables {
					vars[v.Name] = v.Expression
				}
				Expect(vars).To(HaveKeyWithValue("gwNamespace", "'"+gw.Namespace+"'"))
				Expect(vars).To(HaveKeyWithValue("gwName", "'"+gw.Name+"'"))
				var writer rbacv1.ClusterRole
				one(objs, "ClusterRole", "runtime-watcher-gateway-route-writer", &writer)
				Expect(writer.Rules).To(HaveLen(1))
				Expect(writer.Rules[0].ResourceNames).To(Equal([]string{gw.Name}))
				var gwCA certmanagerv1.Issuer
				oneIn(objs, "Issuer", gw.Namespace, gwCert.Spec.IssuerRef.Name, &gwCA)
				Expect(gwCA.Spec.CA).NotTo(BeNil())
				Expect(args["gateway-ca-secret"]).To(Equal(gw.Namespace + "/" + gwCA.Spec.CA.SecretName))

				Expect(args["skr-webhook-image"]).NotTo(BeEmpty())
				if dir != "manifests/kcp/base" {
					// The SKR image comes from the same registry and release.
					repo, tag, ok := strings.Cut(c.Image, ":")
					Expect(ok).To(BeTrue(), "image %s has no tag", c.Image)
					Expect(args["skr-webhook-image"]).To(Equal(path.Dir(repo) + "/skr-webhook:" + tag))
				}
			})

			DescribeTable("bootstrap each CA: self-signed Issuer -> CA Certificate (new key at renewal) -> CA Issuer, in one namespace",
				func(namespace, name string) {
					var ca certmanagerv1.Issuer
					oneIn(objs, "Issuer", namespace, name, &ca)
					Expect(ca.Spec.CA).NotTo(BeNil())
					var caCert certmanagerv1.Certificate
					oneIn(objs, "Certificate", namespace, ca.Spec.CA.SecretName, &caCert)
					Expect(caCert.Spec.SecretName).To(Equal(ca.Spec.CA.SecretName))
					Expect(caCert.Spec.IsCA).To(BeTrue())
					Expect(caCert.Spec.PrivateKey.Algorithm).To(Equal(certmanagerv1.ECDSAKeyAlgorithm), "the e2e suite signs test certificates with the CA's ECDSA key")
					Expect(caCert.Spec.PrivateKey.RotationPolicy).To(Equal(certmanagerv1.RotationPolicyAlways),
						"a CA rotation brings a new key; vs-controller keeps old and new CA in the bundles (docs/certificates.md)")
					Expect(caCert.Spec.IssuerRef.Kind).To(Equal("Issuer"))
					var root certmanagerv1.Issuer
					oneIn(objs, "Issuer", namespace, caCert.Spec.IssuerRef.Name, &root)
					Expect(root.Spec.SelfSigned).NotTo(BeNil())
					Expect(caCert.Spec.SecretTemplate).NotTo(BeNil())
					Expect(caCert.Spec.SecretTemplate.Labels).To(HaveKeyWithValue(contract.LabelPartOf, contract.PartOf),
						"the CA Secret carries the label of vs-controller's Secret cache (docs/security.md)")
				},
				Entry("runtime CA", "kcp-system", "runtime-watcher-ca"),
				Entry("gateway CA", "istio-system", "kcp-gateway-ca"),
			)

			It("cover every Deployment with a PodDisruptionBudget", func() {
				pdbs := find(objs, "PodDisruptionBudget", "")
				for _, u := range find(objs, "Deployment", "") {
					var d appsv1.Deployment
					decode(u, &d)
					covered := false
					for _, p := range pdbs {
						var pdb policyv1.PodDisruptionBudget
						decode(p, &pdb)
						sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
						Expect(err).NotTo(HaveOccurred())
						covered = covered || (pdb.Namespace == d.Namespace && sel.Matches(labels.Set(d.Spec.Template.Labels)))
					}
					Expect(covered).To(BeTrue(), "Deployment %s has no PodDisruptionBudget", d.Name)
				}
			})

			// Issue 36: vs-controller and module-sync share the runtimes
			// across replicas; each pod is a member under its own name.
			DescribeTable("run the per-runtime components as shards: replicas that are members under their pod's name, spread over nodes, drained one at a time",
				func(name string) {
					var d appsv1.Deployment
					one(objs, "Deployment", name, &d)
					if dir == "manifests/kcp/base" {
						Expect(d.Spec.Replicas).To(HaveValue(BeNumerically(">=", 3))) // the kind overlay runs one each
					}
					args := containerArgs(container(&d, name))
					Expect(args).To(HaveKeyWithValue("shard-identity", "pod-metadata-name"), "each pod is a member under its own name")
					Expect(args).To(HaveKeyWithValue("leader-elect", "true"), "the cluster-wide work stays with one elected replica")
					aff := d.Spec.Template.Spec.Affinity
					Expect(aff).NotTo(BeNil())
					Expect(aff.PodAntiAffinity).NotTo(BeNil())
					terms := aff.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution
					Expect(terms).NotTo(BeEmpty())
					Expect(terms[0].PodAffinityTerm.TopologyKey).To(Equal("kubernetes.io/hostname"))
					sel, err := metav1.LabelSelectorAsSelector(terms[0].PodAffinityTerm.LabelSelector)
					Expect(err).NotTo(HaveOccurred())
					Expect(sel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue(), "the anti-affinity selects the Deployment's own pods")
					var pdb policyv1.PodDisruptionBudget
					one(objs, "PodDisruptionBudget", name, &pdb)
					Expect(pdb.Spec.MaxUnavailable).NotTo(BeNil())
					Expect(pdb.Spec.MaxUnavailable.IntValue()).To(Equal(1))
				},
				Entry("vs-controller", "vs-controller"),
				Entry("module-sync", "module-sync"),
			)
		})
	}

	for _, dir := range workloadBuilds {
		It("run every container of "+dir+" non-root on a read-only root, with probes and resources", func() {
			objs := mustBuild(dir)
			deployments := find(objs, "Deployment", "")
			Expect(deployments).NotTo(BeEmpty())
			for _, u := range deployments {
				var d appsv1.Deployment
				decode(u, &d)
				pod := d.Spec.Template.Spec
				Expect(pod.SecurityContext).NotTo(BeNil(), d.Name)
				Expect(pod.SecurityContext.RunAsNonRoot).To(HaveValue(BeTrue()), d.Name)
				Expect(pod.SecurityContext.SeccompProfile).NotTo(BeNil(), d.Name)
				Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault), d.Name)
				for _, c := range pod.Containers {
					what := d.Name + "/" + c.Name
					Expect(c.SecurityContext).NotTo(BeNil(), what)
					Expect(c.SecurityContext.ReadOnlyRootFilesystem).To(HaveValue(BeTrue()), what)
					Expect(c.SecurityContext.AllowPrivilegeEscalation).To(HaveValue(BeFalse()), what)
					Expect(c.SecurityContext.Capabilities.Drop).To(ContainElement(corev1.Capability("ALL")), what)
					Expect(c.Resources.Requests).To(And(HaveKey(corev1.ResourceCPU), HaveKey(corev1.ResourceMemory)), what)
					Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory), what)
					for probe, p := range map[string]*corev1.Probe{"/healthz": c.LivenessProbe, "/readyz": c.ReadinessProbe} {
						Expect(p).NotTo(BeNil(), "%s: probe %s", what, probe)
						Expect(p.HTTPGet).NotTo(BeNil(), what)
						Expect(p.HTTPGet.Path).To(Equal(probe), what)
						Expect(p.HTTPGet.Port.Type).To(Equal(intstr.String), what)
						port := containerPort(c, p.HTTPGet.Port.StrVal)
						if a, ok := containerArgs(c)["health-probe-bind-address"]; ok {
							Expect(addrPort(a)).To(Equal(port), what)
						}
					}
				}
			}
		})

		It("bind, in "+dir+", only roles and service accounts that exist", func() {
			objs := mustBuild(dir)
			exists := func(kind, ns, name string) bool {
				for _, o := range find(objs, kind, name) {
					if o.GetNamespace() == ns {
						return true
					}
				}
				return false
			}
			for _, u := range append(find(objs, "RoleBinding", ""), find(objs, "ClusterRoleBinding", "")...) {
				var b rbacv1.RoleBinding // same fields as a ClusterRoleBinding
				decode(u, &b)
				roleNS := b.Namespace
				if b.RoleRef.Kind == "ClusterRole" {
					roleNS = ""
				}
				Expect(exists(b.RoleRef.Kind, roleNS, b.RoleRef.Name)).To(BeTrue(), "%s %s binds the missing %s %s", u.GetKind(), b.Name, b.RoleRef.Kind, b.RoleRef.Name)
				for _, s := range b.Subjects {
					Expect(s.Kind).To(Equal("ServiceAccount"), "%s %s", u.GetKind(), b.Name)
					Expect(exists("ServiceAccount", s.Namespace, s.Name)).To(BeTrue(), "%s %s binds the missing ServiceAccount %s/%s", u.GetKind(), b.Name, s.Namespace, s.Name)
				}
			}
			for _, u := range find(objs, "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				if sa := d.Spec.Template.Spec.ServiceAccountName; sa != "" {
					Expect(exists("ServiceAccount", d.Namespace, sa)).To(BeTrue(), "Deployment %s runs as the missing ServiceAccount %s", d.Name, sa)
				}
			}
		})
	}
})

var _ = Describe("the Istio mesh config (manifests/istio)", func() {
	It("parses strictly as Istio's MeshConfig and makes the gateway set XFCC itself (SANITIZE_SET)", func() {
		mc, _ := meshConfig()
		Expect(mc.GetDefaultConfig().GetGatewayTopology().GetForwardClientCertDetails()).To(Equal(meshv1alpha1.ForwardClientCertDetails_SANITIZE_SET))
	})

	It("is the same for istioctl (istio-operator.yaml) as for Helm (istiod-values.yaml)", func() {
		_, values := meshConfig()
		var op struct {
			Kind string `json:"kind"`
			Spec struct {
				MeshConfig map[string]any `json:"meshConfig"`
				Components struct {
					IngressGateways []struct {
						Name    string `json:"name"`
						Enabled bool   `json:"enabled"`
					} `json:"ingressGateways"`
				} `json:"components"`
			} `json:"spec"`
		}
		readYAML("manifests/istio/istio-operator.yaml", &op)
		Expect(op.Kind).To(Equal("IstioOperator"))
		parseMesh(op.Spec.MeshConfig)
		Expect(op.Spec.MeshConfig).To(Equal(values))
		Expect(op.Spec.Components.IngressGateways).To(ContainElement(And(
			HaveField("Name", "istio-ingressgateway"), HaveField("Enabled", true))))
	})

	It("rejects a misspelled mesh config field (control for the strict parsing above)", func() {
		_, values := meshConfig()
		values["defaultConfig"].(map[string]any)["gatewayTopolgy"] = map[string]any{"forwardClientCertDetails": "SANITIZE_SET"}
		b, err := sigsyaml.Marshal(values)
		Expect(err).NotTo(HaveOccurred())
		j, err := sigsyaml.YAMLToJSON(b)
		Expect(err).NotTo(HaveOccurred())
		Expect(protojson.Unmarshal(j, &meshv1alpha1.MeshConfig{})).NotTo(Succeed())
	})
})

var _ = Describe("the kind e2e files (test/kind)", func() {
	type portMapping struct {
		ContainerPort int32  `json:"containerPort"`
		HostPort      int32  `json:"hostPort"`
		ListenAddress string `json:"listenAddress"`
	}
	type kindConfig struct {
		Kind  string `json:"kind"`
		Name  string `json:"name"`
		Nodes []struct {
			Role              string        `json:"role"`
			ExtraPortMappings []portMapping `json:"extraPortMappings"`
		} `json:"nodes"`
	}

	It("publish the gateway's NodePort where the kind overlay's settings say it is", func() {
		var kcpCluster, skrCluster kindConfig
		readYAML("test/kind/kcp-cluster.yaml", &kcpCluster)
		readYAML("test/kind/skr-cluster.yaml", &skrCluster)
		Expect(kcpCluster.Kind).To(Equal("Cluster"))
		Expect(kcpCluster.Name).NotTo(Equal(skrCluster.Name))
		Expect(kcpCluster.Nodes).To(HaveLen(1))
		Expect(kcpCluster.Nodes[0].ExtraPortMappings).To(HaveLen(1))
		pm := kcpCluster.Nodes[0].ExtraPortMappings[0]
		Expect(pm.ListenAddress).To(Equal("127.0.0.1"), "the gateway of a test cluster is not published to the network")

		settings := overlaySettings("manifests/kcp/overlays/kind")
		// Qualified by the Docker network "kind": Istio refuses a Gateway
		// host that is a short name.
		Expect(settings["gatewayHost"]).To(Equal(kcpCluster.Name+"-control-plane.kind"),
			"the SKR's pods reach the KCP node by its container name on the Docker network kind")
		Expect(settings["gatewayAddress"]).To(Equal(net.JoinHostPort(settings["gatewayHost"], strconv.Itoa(int(pm.ContainerPort)))))

		var gwValues struct {
			Labels  map[string]string `json:"labels"`
			Service struct {
				Type  string               `json:"type"`
				Ports []corev1.ServicePort `json:"ports"`
			} `json:"service"`
			Autoscaling struct {
				Enabled bool `json:"enabled"`
			} `json:"autoscaling"`
		}
		readYAML("test/kind/istio-gateway-values.yaml", &gwValues)
		Expect(gwValues.Service.Type).To(Equal("NodePort"))
		Expect(gwValues.Service.Ports).To(ContainElement(And(HaveField("Name", "https"), HaveField("Port", int32(443)), HaveField("NodePort", pm.ContainerPort))))
		Expect(gwValues.Autoscaling.Enabled).To(BeFalse(), "the e2e suite scales the gateway to 0 and back")
		var gw istionetworkingv1.Gateway
		one(mustBuild("manifests/kcp/overlays/kind"), "Gateway", "kcp-gateway", &gw)
		for k, v := range gw.Spec.GetSelector() {
			Expect(gwValues.Labels).To(HaveKeyWithValue(k, v), "the gateway pods must carry the Gateway's selector")
		}
	})

	It("pin every version in versions.env, in step with go.mod, the local API server and the istiod source", func() {
		versions := readEnvFile("test/kind/versions.env")
		for _, k := range []string{"KIND_VERSION", "KUBECTL_VERSION", "CERT_MANAGER_VERSION", "HELM_VERSION", "CONTAINERD_VERSION", "RUNC_VERSION", "CRI_TOOLS_VERSION", "CNI_PLUGINS_VERSION", "COREDNS_VERSION", "KUBE_ROUTER_VERSION", "DEBIAN_SUITE", "DEBIAN_MIRROR"} {
			Expect(versions[k]).NotTo(BeEmpty(), k)
		}
		mod, err := os.ReadFile(repoPath("go.mod"))
		Expect(err).NotTo(HaveOccurred())
		// kind runs the istiod of make run and make test: its one version is
		// the istio.io/istio that test/tools/istio/go.mod pins; its gateway
		// proxy is built from the same source (make istio-proxy-image).
		Expect(versions).NotTo(HaveKey("ISTIO_VERSION"), "a second copy of the istiod version: e2e.sh takes it from test/tools/istio/go.mod")
		Expect(versions).NotTo(HaveKey("ISTIO_PROXY_IMAGE"), "the gateway's proxy is built here, not pulled")
		Expect(versions["CERT_MANAGER_VERSION"]).To(Equal(goModVersion(mod, "github.com/cert-manager/cert-manager")))
		k8sMinor := minor(goModVersion(mod, "k8s.io/api")) // v0.36.x ~ Kubernetes 1.36
		Expect(versions["KUBECTL_VERSION"]).To(HavePrefix("v1." + k8sMinor + "."))
		// Every version is used by a script of the kind path.
		scripts, err := filepath.Glob(repoPath("test/kind/*.sh"))
		Expect(err).NotTo(HaveOccurred())
		var all strings.Builder
		for _, f := range scripts {
			b, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			all.Write(b)
		}
		for k := range versions {
			Expect(all.String()).To(Or(ContainSubstring("$"+k), ContainSubstring("${"+k)), "no script of test/kind uses %s", k)
		}
	})
})

var _ = Describe("the samples (manifests/samples)", func() {
	var objs []*unstructured.Unstructured
	BeforeEach(func() { objs = mustBuild("manifests/samples") })

	It("are the sample system of the local environment (test/localenv), so both e2e runs see the same names", func() {
		want := localenv.SampleWatcher()
		var w v1beta2.Watcher
		one(objs, "Watcher", want.Name, &w)
		Expect(w.Namespace).To(Equal(want.Namespace))
		Expect(w.Spec).To(Equal(want.Spec))

		kyma := one(objs, "Kyma", localenv.RuntimeID, nil)
		Expect(kyma.GetNamespace()).To(Equal(localenv.KymaNamespace))
		Expect(kyma.GetLabels()).To(HaveKeyWithValue(contract.LabelRuntimeID, localenv.RuntimeID))
		Expect(kyma.GetAnnotations()).To(HaveKeyWithValue(contract.AnnotationSKRDomain, localenv.SKRDomain))
	})

	It("give the runtime its kubeconfig Secret as vs-controller looks it up", func() {
		var s corev1.Secret
		one(objs, "Secret", skrclient.SecretName(localenv.RuntimeID), &s)
		Expect(s.Namespace).To(Equal(localenv.KymaNamespace))
		Expect(s.StringData).To(HaveKey(skrclient.SecretKey))
		Expect(s.Labels).To(HaveKeyWithValue(contract.LabelPartOf, contract.PartOf), "labelled for vs-controller's Secret cache, as docs/operations.md recommends")
		_, err := skrclient.RESTConfig([]byte(s.StringData[skrclient.SecretKey]))
		Expect(err).NotTo(HaveOccurred(), "vs-controller must accept the sample kubeconfig's form")
	})

	It("route the Watcher to the example operator through the KCP Gateway", func() {
		var w v1beta2.Watcher
		one(objs, "Watcher", localenv.WatcherName, &w)
		var gw istionetworkingv1.Gateway
		one(mustBuild("manifests/kcp/base"), "Gateway", "kcp-gateway", &gw)
		sel, err := metav1.LabelSelectorAsSelector(&w.Spec.Gateway.LabelSelector)
		Expect(err).NotTo(HaveOccurred())
		Expect(sel.Matches(labels.Set(gw.Labels))).To(BeTrue(), "the Watcher selects no Gateway of manifests/kcp")

		var svc corev1.Service
		one(objs, "Service", w.Spec.ServiceInfo.Name, &svc)
		Expect(svc.Namespace).To(Equal(w.Spec.ServiceInfo.Namespace))
		var sp *corev1.ServicePort
		for i := range svc.Spec.Ports {
			if int64(svc.Spec.Ports[i].Port) == w.Spec.ServiceInfo.Port {
				sp = &svc.Spec.Ports[i]
			}
		}
		Expect(sp).NotTo(BeNil(), "Service %s has no port %d", svc.Name, w.Spec.ServiceInfo.Port)

		var d appsv1.Deployment
		one(objs, "Deployment", "example-operator", &d)
		Expect(labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
		c := container(&d, "example-operator")
		args := containerArgs(c)
		Expect(args["manager"]).To(Equal(w.Spec.Manager))
		Expect(args["kyma-namespace"]).To(Equal(localenv.KymaNamespace))
		Expect(addrPort(args["listen-addr"])).To(Equal(containerPort(c, sp.TargetPort.StrVal)))

		// Only the ingress gateway may reach the event port: the operator
		// trusts the identity header ext-authz sets.
		var np networkingv1.NetworkPolicy
		one(objs, "NetworkPolicy", "example-operator", &np)
		podSel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		Expect(err).NotTo(HaveOccurred())
		Expect(podSel.Matches(labels.Set(d.Spec.Template.Labels))).To(BeTrue())
		for _, rule := range np.Spec.Ingress {
			opensEvents := false
			for _, p := range rule.Ports {
				opensEvents = opensEvents || (p.Port != nil && (p.Port.StrVal == sp.TargetPort.StrVal || p.Port.IntVal == addrPort(args["listen-addr"])))
			}
			if !opensEvents {
				continue
			}
			Expect(rule.From).To(HaveLen(1))
			from := rule.From[0]
			Expect(from.NamespaceSelector.MatchLabels).To(Equal(map[string]string{"kubernetes.io/metadata.name": gw.Namespace}))
			Expect(from.PodSelector.MatchLabels).To(Equal(gw.Spec.GetSelector()))
		}
	})
})

// readEnvFile parses KEY=value lines (comments and blank lines ignored).
func readEnvFile(rel string) map[string]string {
	GinkgoHelper()
	b, err := os.ReadFile(repoPath(rel))
	Expect(err).NotTo(HaveOccurred())
	out := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		Expect(ok).To(BeTrue(), "%s: %q is not KEY=value", rel, line)
		out[k] = v
	}
	return out
}

// goModVersion is the version go.mod requires of module.
func goModVersion(mod []byte, module string) string {
	GinkgoHelper()
	m := regexp.MustCompile(`(?m)^\s*(?:require\s+)?` + regexp.QuoteMeta(module) + `\s+(v\S+)`).FindSubmatch(mod)
	Expect(m).NotTo(BeNil(), "go.mod does not require %s", module)
	return string(m[1])
}

// minor is the minor number of a vX.Y.Z version.
func minor(v string) string {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if len(parts) < 2 {
		return ""
	}
	return parts[1]
}

// oneIn is one() for a namespaced object.
func oneIn(objs []*unstructured.Unstructured, kind, namespace, name string, out any) {
	GinkgoHelper()
	var found []*unstructured.Unstructured
	for _, o := range find(objs, kind, name) {
		if o.GetNamespace() == namespace {
			found = append(found, o)
		}
	}
	Expect(found).To(HaveLen(1), "want exactly one %s %s/%s", kind, namespace, name)
	decode(found[0], out)
}
