package v1beta2_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func validWatcher(name string) *v1beta2.Watcher {
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
		Spec: v1beta2.WatcherSpec{
			ServiceInfo:     v1beta2.Service{Name: "klm-event-service", Namespace: "kcp-system", Port: 8082},
			Manager:         "lifecycle-manager",
			LabelsToWatch:   map[string]string{"operator.kyma-project.io/watched-by": "lifecycle-manager"},
			ResourceToWatch: v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "*", Resource: "kymas"},
			Field:           v1beta2.SpecField,
			Gateway: v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{"operator.kyma-project.io/watcher-gateway": "default"},
			}},
		},
	}
}

var _ = Describe("Watcher CRD", func() {
	var ctx context.Context
	var c client.Client
	BeforeEach(func() {
		ctx = context.Background()
		c = env.Cluster("kcp").Client
	})

	It("accepts a valid Watcher and writes its status through the status subresource", func() {
		w := validWatcher("valid")
		Expect(c.Create(ctx, w)).To(Succeed())

		w.Status = v1beta2.WatcherStatus{
			State:              v1beta2.StateReady,
			ObservedGeneration: w.Generation,
			Conditions: []metav1.Condition{{
				Type: "VirtualServiceReady", Status: metav1.ConditionTrue, Reason: "Applied",
				LastTransitionTime: metav1.Now(),
			}},
		}
		Expect(c.Status().Update(ctx, w)).To(Succeed())

		got := &v1beta2.Watcher{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(w), got)).To(Succeed())
		Expect(got.Status.State).To(Equal(v1beta2.StateReady))
		Expect(got.Status.Conditions).To(HaveLen(1))
		Expect(got.ManagerName()).To(Equal("lifecycle-manager"))

		By("ignoring status in a plain update (status is a subresource)")
		got.Status.State = v1beta2.StateError
		got.Spec.Field = v1beta2.StatusField
		Expect(c.Update(ctx, got)).To(Succeed())
		again := &v1beta2.Watcher{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(w), again)).To(Succeed())
		Expect(again.Status.State).To(Equal(v1beta2.StateReady))
		Expect(again.Spec.Field).To(Equal(v1beta2.StatusField))
	})

	DescribeTable("rejects, like Lifecycle Manager's CRD, Watchers without a required field or with an unknown enum value",
		func(name string, mutate func(u map[string]any), wantMessage string) {
			w := validWatcher(name)
			obj, err := runtimeToUnstructured(w)
			Expect(err).NotTo(HaveOccurred())
			mutate(obj.Object)
			err = c.Create(ctx, obj)
			Expect(apierrors.IsInvalid(err)).To(BeTrue(), "want Invalid, got %v", err)
			Expect(err.Error()).To(ContainSubstring(wantMessage))
		},
		Entry("field not spec|status", "bad-field", func(u map[string]any) {
			u["spec"].(map[string]any)["field"] = "metadata"
		}, `spec.field: Unsupported value: "metadata"`),
		Entry("serviceInfo missing", "no-service", func(u map[string]any) {
			delete(u["spec"].(map[string]any), "serviceInfo")
		}, "spec.serviceInfo: Required value"),
	)

	// These were admission rejections before; Lifecycle Manager's CRD
	// accepts them, so ours does too, and SpecProblems (which vs-controller
	// reports in the status) says what is wrong.
	DescribeTable("accepts Watchers that LM's CRD accepts and reports their problems in SpecProblems",
		func(name string, mutate func(u map[string]any), wantProblem string) {
			w := validWatcher(name)
			obj, err := runtimeToUnstructured(w)
			Expect(err).NotTo(HaveOccurred())
			mutate(obj.Object)
			Expect(c.Create(ctx, obj)).To(Succeed())
			got := &v1beta2.Watcher{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
			Expect(got.SpecProblems()).To(ConsistOf(HavePrefix(wantProblem)))
		},
		Entry("port 0", "port-zero", func(u map[string]any) {
			u["spec"].(map[string]any)["serviceInfo"].(map[string]any)["port"] = int64(0)
		}, "spec.serviceInfo.port 0 is not in 1..65535"),
		Entry("port 65536", "port-high", func(u map[string]any) {
			u["spec"].(map[string]any)["serviceInfo"].(map[string]any)["port"] = int64(65536)
		}, "spec.serviceInfo.port 65536 is not in 1..65535"),
		Entry("manager not a DNS label", "bad-manager", func(u map[string]any) {
			u["spec"].(map[string]any)["manager"] = "Lifecycle_Manager"
		}, `spec.manager "Lifecycle_Manager" is not a DNS-1123 label`),
		Entry("empty resource", "no-resource", func(u map[string]any) {
			u["spec"].(map[string]any)["resourceToWatch"].(map[string]any)["resource"] = ""
		}, "spec.resourceToWatch.resource is empty"),
		Entry("labelsToWatch not a selector", "bad-labels", func(u map[string]any) {
			u["spec"].(map[string]any)["labelsToWatch"] = map[string]any{"with space": "x"}
		}, "spec.labelsToWatch is not a label selector"),
	)

	It("accepts a Watcher without spec, as LM's CRD does, and lists every problem", func() {
		obj, err := runtimeToUnstructured(validWatcher("no-spec"))
		Expect(err).NotTo(HaveOccurred())
		delete(obj.Object, "spec")
		Expect(c.Create(ctx, obj)).To(Succeed())
		got := &v1beta2.Watcher{}
		Expect(c.Get(ctx, client.ObjectKeyFromObject(obj), got)).To(Succeed())
		Expect(got.SpecProblems()).To(Equal([]string{
			"no manager name: spec.manager and the label operator.kyma-project.io/managed-by are both empty",
			"spec.serviceInfo.name is empty",
			"spec.serviceInfo.namespace is empty",
			"spec.serviceInfo.port 0 is not in 1..65535",
			`spec.field "" is neither "spec" nor "status"`,
			"spec.resourceToWatch.resource is empty",
			"spec.resourceToWatch.version is empty",
		}))
	})

	It("installs Istio's and cert-manager's CRDs", func() {
		Expect(c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}})).To(Succeed())
		gw := &istionetworkingv1.Gateway{
			ObjectMeta: metav1.ObjectMeta{Name: "kcp-gateway", Namespace: "istio-system"},
		}
		gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
		gw.Spec.Servers = []*istioapinetworking.Server{{
			Port:  &istioapinetworking.Port{Number: 443, Name: "https", Protocol: "HTTPS"},
			Hosts: []string{"watcher.kcp.example.com"},
			Tls:   &istioapinetworking.ServerTLSSettings{Mode: istioapinetworking.ServerTLSSettings_MUTUAL, CredentialName: "kcp-gateway-tls"},
		}}
		Expect(c.Create(ctx, gw)).To(Succeed())

		cert := &certmanagerv1.Certificate{
			ObjectMeta: metav1.ObjectMeta{Name: "runtime-1-webhook-tls", Namespace: "default"},
			Spec: certmanagerv1.CertificateSpec{
				CommonName: "runtime-1",
				DNSNames:   []string{"skr.example.com"},
				SecretName: "runtime-1-webhook-tls",
				IssuerRef:  cmmeta.IssuerReference{Name: "watcher-ca", Kind: "Issuer"},
			},
		}
		Expect(c.Create(ctx, cert)).To(Succeed())
	})

	It("installs the Kyma stand-in CRD, which keeps spec and status as given", func() {
		kyma := &unstructured.Unstructured{}
		kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		kyma.SetNamespace("default")
		kyma.SetName("kyma-sample")
		kyma.SetAnnotations(map[string]string{"skr-domain": "skr.example.com"})
		Expect(unstructured.SetNestedField(kyma.Object, "regular", "spec", "channel")).To(Succeed())
		Expect(c.Create(ctx, kyma)).To(Succeed())
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		Expect(c.Get(ctx, client.ObjectKeyFromObject(kyma), got)).To(Succeed())
		channel, found, err := unstructured.NestedString(got.Object, "spec", "channel")
		Expect(err).NotTo(HaveOccurred())
		Expect(found).To(BeTrue())
		Expect(channel).To(Equal("regular"))
	})

	It("writes a kubeconfig that kubectl can use", func() {
		kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			dir, err := testenv.AssetsDir()
			Expect(err).NotTo(HaveOccurred())
			kubectl = filepath.Join(dir, "kubectl")
		}
		Expect(c.Create(ctx, validWatcher("seen-by-kubectl"))).To(Succeed())
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(cctx, kubectl, "--kubeconfig", env.Cluster("kcp").KubeconfigPath,
			"get", "watchers.operator.kyma-project.io", "-A", "-o", "name").CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), string(out))
		Expect(string(out)).To(ContainSubstring("watcher.operator.kyma-project.io/seen-by-kubectl"))
	})
})
