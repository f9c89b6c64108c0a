// Package integration tests vs-controller against two real API servers: a
// KCP (Watchers, Gateways, Kymas, Certificates) and an SKR that receives the
// bundle. cert-manager's own controllers issue the Certificates
// (test/cmcontrollers), kube-controller-manager collects what they own.
package integration_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istioapiv1 "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

const (
	kymaNS      = "kcp-system"
	gatewayNS   = "istio-system"
	issuerName  = "runtime-ca"
	kcpGateway  = "gateway.kcp.example.com"
	skrImage    = "europe-docker.pkg.dev/kyma/skr-webhook:test"
	testTimeout = 60 * time.Second
)

var (
	env      *testenv.Env
	kcp, skr *testenv.Cluster
	ca       *pki.CA
	stop     context.CancelFunc
	// webhookIngressFrom is the suite's --skr-webhook-ingress-from.
	webhookIngressFrom []networkingv1.NetworkPolicyPeer
	// vsMgr is vs-controller's manager (its cached client and API reader).
	vsMgr   ctrl.Manager
	done    = make(chan struct{}, 2)
	started int
)

func TestIntegration(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "vs-controller integration")
}

var _ = BeforeSuite(func() {
	ctrl.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(testTimeout)
	SetDefaultEventuallyPollingInterval(100 * time.Millisecond)

	var err error
	env, err = testenv.Start("kcp", "skr")
	Expect(err).NotTo(HaveOccurred())
	kcp, skr = env.Cluster("kcp"), env.Cluster("skr")
	Expect(kcp.StartControllerManager()).To(Succeed())
	for _, ns := range []string{kymaNS, gatewayNS} {
		Expect(kcp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	ca, err = pki.NewCA("runtime-watcher test CA")
	Expect(err).NotTo(HaveOccurred())
	Expect(cmcontrollers.InstallCA(context.Background(), kcp.Client, ca, kymaNS, issuerName)).To(Succeed())

	var ctx context.Context
	ctx, stop = context.WithCancel(context.Background())
	started++
	go func() {
		defer GinkgoRecover()
		defer func() { done <- struct{}{} }()
		Expect(cmcontrollers.Run(ctx, cmcontrollers.Options{Kubeconfig: kcp.KubeconfigPath, Log: ctrl.Log})).To(Succeed())
	}()
	webhookIngressFrom, err = bundle.ParseIngressFrom(bundle.IngressFromGardener)
	Expect(err).NotTo(HaveOccurred())
	mgr, err := vsmanager.New(ctx, kcp.Config, vsmanager.Options{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		GatewayNamespace:       gatewayNS,
		KymaNamespace:          kymaNS,
		Issuer:                 cmmeta.IssuerReference{Name: issuerName, Kind: "Issuer", Group: "cert-manager.io"},
		Bundle:                 bundle.Options{Image: skrImage, KCPAddr: kcpGateway, WebhookIngressFrom: webhookIngressFrom},
		SKRTimeout:             3 * time.Second,
		WatcherDebounce:        50 * time.Millisecond,
		KubeconfigRetry:        time.Second,
		Adoption:               takeover.Options{Poll: 200 * time.Millisecond},
		SkipNameValidation:     true,
	})
	Expect(err).NotTo(HaveOccurred())
	vsMgr = mgr
	started++
	go func() {
		defer GinkgoRecover()
		defer func() { done <- struct{}{} }()
		Expect(mgr.Start(ctx)).To(Succeed())
	}()
})

var _ = AfterSuite(func() {
	if stop != nil {
		stop()
		for range started {
			Eventually(done).Should(Receive())
		}
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// newNamespace creates a uniquely named namespace in the KCP.
func newNamespace(ctx context.Context, prefix string) string {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: prefix + "-" + rand.String(5)}}
	Expect(kcp.Client.Create(ctx, ns)).To(Succeed())
	return ns.Name
}

func newGateway(name string, labels map[string]string, hosts ...string) *istionetworkingv1.Gateway {
	gw := &istionetworkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: gatewayNS, Labels: labels}}
	gw.Spec.Selector = map[string]string{"istio": "ingressgateway"}
	gw.Spec.Servers = []*istioapiv1.Server{{
		Port:  &istioapiv1.Port{Number: 443, Name: "https", Protocol: "HTTPS"},
		Hosts: hosts,
	}}
	return gw
}

// managerUsers is the spec that first named each manager in newWatcher. The suite shares one KCP and keeps every Watcher, and the
// oldest Watcher of a manager holds its route: a second container naming
// the same manager gets a Watcher that (rightly) loses, and its spec fails
// or passes depending on the order (the CI run at 4a299ac). A spec that
// wants a route conflict names one manager twice itself.
var managerUsers = map[string]string{}

func newWatcher(ns, name, manager string, gatewayLabels map[string]string) *v1beta2.Watcher {
	spec := CurrentSpecReport().FullText()
	if first, ok := managerUsers[manager]; ok && first != spec {
		Fail(fmt.Sprintf("manager %q is already used by %q; give each spec's Watchers their own manager", manager, first), 1)
	}
	managerUsers[manager] = spec
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1beta2.WatcherSpec{
			ServiceInfo:     v1beta2.Service{Name: manager + "-event-service", Namespace: ns, Port: 8082},
			Manager:         manager,
			LabelsToWatch:   map[string]string{"operator.kyma-project.io/watched-by": manager},
			ResourceToWatch: v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "*", Resource: "kymas"},
			Field:           v1beta2.SpecField,
			Gateway:         v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{MatchLabels: gatewayLabels}},
		},
	}
}

// eventsFor lists the Events about an object in the KCP.
func eventsFor(ctx context.Context, obj client.Object) []corev1.Event {
	var list corev1.EventList
	ExpectWithOffset(1, kcp.Client.List(ctx, &list, client.InNamespace(obj.GetNamespace()))).To(Succeed())
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Name == obj.GetName() && e.InvolvedObject.UID == obj.GetUID() {
			out = append(out, e)
		}
	}
	return out
}

func reasons(events []corev1.Event) []string {
	var out []string
	for _, e := range events {
		out = append(out, e.Type+"/"+e.Reason)
	}
	return out
}

// usableWebhookNames are the webhook names the SKR configuration must hold
// right now: one per Watcher in the KCP that is not being deleted, whose
// spec has no problems and that owns its manager's route.
func usableWebhookNames(ctx context.Context) []string {
	var list v1beta2.WatcherList
	ExpectWithOffset(1, kcp.Client.List(ctx, &list)).To(Succeed())
	names := []string{}
	for _, w := range bundle.Webhooked(list.Items) {
		names = append(names, w.WebhookName())
	}
	sort.Strings(names)
	return names
}

// certificateOf returns a runtime's Certificate in the KCP.
func certificateOf(ctx context.Context, runtimeID string) (*certmanagerv1.Certificate, error) {
	c := &certmanagerv1.Certificate{}
	return c, kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(runtimeID)}, c)
}

func kubeconfigOf(c *testenv.Cluster) []byte {
	data, err := os.ReadFile(c.KubeconfigPath)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return data
}
