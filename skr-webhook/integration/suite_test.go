// Package integration runs the real skr-webhook binary behind a real SKR
// API server (kube-apiserver + etcd from test/testenv) that calls it through
// a ValidatingWebhookConfiguration, while a KCP stub (a real HTTPS server
// that requires and verifies client certificates, see
// skr-webhook/internal/kcpstub) receives the events.
package integration

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const (
	namespace     = "kcp-system"
	manager       = "lifecycle-manager"
	statusManager = "status-watcher"
	// objectInterval is the binary's --object-interval.
	objectInterval = time.Second
	// requestTimeout is the binary's --request-timeout: a webhook that
	// waited for the KCP would hold a write at least this long.
	requestTimeout = 3 * time.Second
)

var (
	env     *testenv.Env
	skr     client.Client
	stub    *kcpstub.Stub
	webhook *process
	skrCA   *pki.CA
	certDir string
)

func TestIntegration(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "skr-webhook integration")
}

var _ = BeforeSuite(func(ctx SpecContext) {
	ctrllog.SetLogger(zap.New(zap.WriteTo(GinkgoWriter), zap.UseDevMode(true)))
	SetDefaultEventuallyTimeout(30 * time.Second)
	SetDefaultEventuallyPollingInterval(20 * time.Millisecond)

	binary, err := testenv.BuildBinary("skr-webhook")
	Expect(err).NotTo(HaveOccurred())
	env, err = testenv.Start("skr")
	Expect(err).NotTo(HaveOccurred())
	skr = env.Cluster("skr").Client
	Expect(skr.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}})).To(Succeed())

	// Two CAs as in production: the SKR's (webhook serving and client
	// certificate) and the KCP gateway's.
	skrCA, err = pki.NewCA("skr-ca")
	Expect(err).NotTo(HaveOccurred())
	kcpCA, err := pki.NewCA("kcp-gateway-ca")
	Expect(err).NotTo(HaveOccurred())
	kcpLeaf, err := kcpCA.Issue(pki.LeafOptions{CommonName: "kcp-gateway", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	Expect(err).NotTo(HaveOccurred())
	kcpCert, err := kcpLeaf.TLS()
	Expect(err).NotTo(HaveOccurred())
	stub, err = kcpstub.Start(kcpstub.Options{ClientCAs: skrCA.Pool(), Certificate: kcpCert, OnEvent: observe})
	Expect(err).NotTo(HaveOccurred())

	certDir = GinkgoT().TempDir()
	Expect(writeWebhookCert(certDir, skrCA)).To(Succeed())
	kcpCAFile := filepath.Join(certDir, "kcp-ca.crt")
	Expect(os.WriteFile(kcpCAFile, kcpCA.PEM, 0o600)).To(Succeed())

	webhook, err = startProcess(binary,
		"--listen-addr", testenv.FreeAddr(), "--metrics-bind-address", testenv.FreeAddr(), "--health-probe-bind-address", testenv.FreeAddr(),
		"--tls-cert-file", filepath.Join(certDir, "tls.crt"), "--tls-key-file", filepath.Join(certDir, "tls.key"),
		"--ca-file", kcpCAFile, "--kcp-addr", stub.Addr(),
		"--retry-base-delay", "50ms", "--retry-max-delay", "500ms", "--request-timeout", requestTimeout.String(),
		"--object-interval", objectInterval.String(), "--drain-timeout", "10s", "--cert-poll-interval", "1s",
	)
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() int { return webhook.get("/readyz") }).Should(Equal(http.StatusOK))

	Expect(skr.Create(ctx, webhookConfiguration(webhook.listenAddr, skrCA.PEM))).To(Succeed())
	// The API server's webhook informer takes a moment: wait until a write
	// reaches the KCP.
	Eventually(func() int {
		_ = skr.Create(ctx, kyma("probe"))
		return stub.Count(manager, eventOf("probe"))
	}).Should(BeNumerically(">=", 1))
}, NodeTimeout(10*time.Minute))

var _ = AfterSuite(func() {
	if webhook != nil {
		webhook.kill()
	}
	if stub != nil {
		stub.Close()
	}
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// observe is what a KCP operator does on an event: read the watched object.
// It returns the object's resourceVersion, or "absent".
func observe(d kcpstub.Delivery) string {
	if skr == nil || d.Event.WatchedGvk.Kind != "Kyma" {
		return ""
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := skr.Get(ctx, client.ObjectKey{Namespace: d.Event.Watched.Namespace, Name: d.Event.Watched.Name}, u)
	switch {
	case apierrors.IsNotFound(err):
		return "absent"
	case err != nil:
		return "error: " + err.Error()
	}
	return u.GetResourceVersion()
}

func writeWebhookCert(dir string, ca *pki.CA) error {
	leaf, err := ca.Issue(pki.LeafOptions{
		CommonName: "runtime-1",
		DNSNames:   []string{"skr.example.com", "skr-webhook.kyma-system.svc", "skr-webhook.kyma-system.svc.cluster.local"},
		IPs:        []net.IP{net.IPv4(127, 0, 0, 1)},
	})
	if err != nil {
		return err
	}
	return writeAtomically(dir, leaf)
}

// writeAtomically replaces tls.crt and tls.key by renames, as the kubelet
// swaps a Secret volume's files.
func writeAtomically(dir string, leaf *pki.Leaf) error {
	for name, data := range map[string][]byte{"tls.crt": leaf.CertPEM, "tls.key": leaf.KeyPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return err
		}
	}
	return nil
}

func webhookConfiguration(listenAddr string, caBundle []byte) *admissionregistrationv1.ValidatingWebhookConfiguration {
	ignore := admissionregistrationv1.Ignore
	none := admissionregistrationv1.SideEffectClassNoneOnDryRun
	timeout := int32(10)
	equivalent := admissionregistrationv1.Equivalent
	hook := func(name, mgr, resource string) admissionregistrationv1.ValidatingWebhook {
		url := "https://" + listenAddr + contract.ValidatePath(mgr)
		return admissionregistrationv1.ValidatingWebhook{
			Name:                    name,
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: caBundle},
			FailurePolicy:           &ignore,
			SideEffects:             &none,
			TimeoutSeconds:          &timeout,
			MatchPolicy:             &equivalent,
			AdmissionReviewVersions: []string{"v1"},
			Rules: []admissionregistrationv1.RuleWithOperations{{
				Operations: []admissionregistrationv1.OperationType{
					admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete,
				},
				Rule: admissionregistrationv1.Rule{
					APIGroups: []string{v1beta2.GroupVersion.Group}, APIVersions: []string{"*"}, Resources: []string{resource},
				},
			}},
		}
	}
	return &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "skr-webhook"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{
			hook(namespace+".spec-watcher.operator.kyma-project.io", manager, "kymas"),
			hook(namespace+".status-watcher.operator.kyma-project.io", statusManager, "kymas/status"),
		},
	}
}

func kyma(name string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	u.SetNamespace(namespace)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"channel": "regular"}
	return u
}

func eventOf(name string) contract.WatchEvent {
	return contract.WatchEvent{
		Watched: contract.ObjectKey{Namespace: namespace, Name: name},
		WatchedGvk: contract.GroupVersionKind{
			Group: v1beta2.KymaGroupVersionKind.Group, Version: v1beta2.KymaGroupVersionKind.Version, Kind: "Kyma",
		},
	}
}

// process is the running binary.
type process struct {
	cmd                                 *exec.Cmd
	listenAddr, metricsAddr, healthAddr string
	exited                              chan struct{}
	err                                 error
}

func startProcess(binary string, args ...string) (*process, error) {
	return startProcessEnv(binary, nil, args...)
}

// startProcessEnv starts the binary with env added to the test's environment.
func startProcessEnv(binary string, env []string, args ...string) (*process, error) {
	p := &process{exited: make(chan struct{})}
	for i := 0; i+1 < len(args); i++ {
		switch args[i] {
		case "--listen-addr":
			p.listenAddr = args[i+1]
		case "--metrics-bind-address":
			p.metricsAddr = args[i+1]
		case "--health-probe-bind-address":
			p.healthAddr = args[i+1]
		}
	}
	p.cmd = exec.Command(binary, args...)
	if env != nil {
		p.cmd.Env = append(os.Environ(), env...)
	}
	p.cmd.Stdout, p.cmd.Stderr = GinkgoWriter, GinkgoWriter
	if err := p.cmd.Start(); err != nil {
		return nil, err
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) get(path string) int {
	resp, err := http.Get("http://" + p.healthAddr + path)
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

func (p *process) terminate() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

func (p *process) kill() {
	select {
	case <-p.exited:
	default:
		_ = p.cmd.Process.Kill()
		<-p.exited
	}
}

// metric sums the samples of a metric whose labels include the given
// name=value pairs, from the binary's /metrics (0 when none matched).
func (p *process) metric(name string, labels ...string) float64 {
	text, err := promtext.Fetch(context.Background(), "http://"+p.metricsAddr+"/metrics")
	Expect(err).NotTo(HaveOccurred())
	want := map[string]string{}
	for i := 0; i+1 < len(labels); i += 2 {
		want[labels[i]] = labels[i+1]
	}
	sum, _ := promtext.Sum(text, name, want)
	return sum
}

// servingSerial is the serial of the certificate the webhook serves now.
func servingSerial(addr string, ca *pki.CA) string {
	conn, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12})
	if err != nil {
		return "dial: " + err.Error()
	}
	defer conn.Close()
	certs := conn.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return ""
	}
	return serialOf(certs[0])
}

func serialOf(c *x509.Certificate) string { return c.SerialNumber.String() }

func webhookIPs() []net.IP { return []net.IP{net.IPv4(127, 0, 0, 1)} }
