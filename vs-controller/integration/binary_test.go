package integration_test

import (
	"fmt"
	"net/http"
	"os/exec"
	"syscall"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gexec"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

var _ = Describe("The vs-controller binary", Ordered, func() {
	var (
		own     *testenv.Env
		cluster *testenv.Cluster
		session *gexec.Session
		health  string
	)

	BeforeAll(func(ctx SpecContext) {
		// Its own KCP, so it does not share objects with the in-process
		// manager of the other specs.
		var err error
		own, err = testenv.Start("kcp-binary")
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(own.Stop()).To(Succeed()) })
		cluster = own.Cluster("kcp-binary")
		for _, ns := range []string{kymaNS, gatewayNS} {
			Expect(cluster.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		}

		bin, err := testenv.BuildBinary("vs-controller")
		Expect(err).NotTo(HaveOccurred())
		health = testenv.FreeAddr()
		cmd := exec.Command(bin,
			"--kubeconfig="+cluster.KubeconfigPath,
			"--metrics-bind-address=0",
			"--health-probe-bind-address="+health,
			"--health-report-bind-address="+testenv.FreeAddr(),
			"--issuer-name="+issuerName,
			"--kcp-gateway-host="+kcpGateway,
			"--gateway-namespace="+gatewayNS,
			"--kyma-namespace="+kymaNS,
			"--skr-webhook-ingress-from="+bundle.IngressFromGardener,
		)
		session, err = gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			session.Signal(syscall.SIGTERM)
			Eventually(session).Should(gexec.Exit())
		})
	})

	It("becomes ready and keeps a Watcher's VirtualService", func(ctx SpecContext) {
		get := func(path string) func() (int, error) {
			return func() (int, error) {
				resp, err := http.Get(fmt.Sprintf("http://%s%s", health, path))
				if err != nil {
					return 0, err
				}
				resp.Body.Close()
				return resp.StatusCode, nil
			}
		}
		Eventually(get("/readyz")).Should(Equal(http.StatusOK))
		Expect(get("/healthz")()).To(Equal(http.StatusOK))

		sel := map[string]string{"gateway-set": "binary"}
		gw := newGateway("kcp-gateway", sel, "*.kcp.example.com")
		Expect(cluster.Client.Create(ctx, gw)).To(Succeed())
		w := newWatcher("default", "binary-watcher", "binary-operator", sel)
		Expect(cluster.Client.Create(ctx, w)).To(Succeed())

		Eventually(func() (vsView, error) {
			var vs = newVS()
			err := cluster.Client.Get(ctx, client.ObjectKeyFromObject(w), vs)
			return viewOf(vs), err
		}).Should(Equal(vsView{
			Gateways: []string{gatewayNS + "/kcp-gateway"}, Hosts: []string{"*.kcp.example.com"},
			Prefix: "/v2/binary-operator/event", Host: "binary-operator-event-service.default.svc.cluster.local",
			Port: 8082, Routes: 1,
		}))
		Expect(session).NotTo(gexec.Exit())
	})

	It("refuses, at start, SKR webhook ingress sources the API server would refuse", func(ctx SpecContext) {
		bin, err := testenv.BuildBinary("vs-controller")
		Expect(err).NotTo(HaveOccurred())
		bad, err := gexec.Start(exec.Command(bin, "--kubeconfig="+cluster.KubeconfigPath, "--issuer-name="+issuerName,
			"--kcp-gateway-host="+kcpGateway, `--skr-webhook-ingress-from=[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]`), GinkgoWriter, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
		Eventually(bad).Should(gexec.Exit(2))
		Expect(string(bad.Err.Contents())).To(And(ContainSubstring("vs-controller: invalid flags: --skr-webhook-ingress-from: Invalid value"),
			ContainSubstring("peer 0: ipBlock cannot be combined with a selector")))
	})
})
