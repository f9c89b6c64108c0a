package main

import (
	"bytes"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The real binary on SIGTERM with the KCP unreachable: /readyz fails at
// once, admission is still answered (and its event taken), and when the KCP
// comes back within --drain-timeout everything pending — the startup
// resync, the change before and the change after SIGTERM — is delivered
// before the process exits 0.
func TestBinarySIGTERMFailsReadinessAndKeepsAnswering(t *testing.T) {
	testenv.SkipIfShort(t) // builds and runs the binary
	g := gomega.NewWithT(t)
	binary, err := testenv.BuildBinary("skr-webhook")
	if err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("sigterm-ca")
	if err != nil {
		t.Fatal(err)
	}
	local := []net.IP{net.IPv4(127, 0, 0, 1)}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"localhost"}, IPs: local})
	if err != nil {
		t.Fatal(err)
	}
	kcpLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "kcp", IPs: local})
	if err != nil {
		t.Fatal(err)
	}
	kcpCert, err := kcpLeaf.TLS()
	if err != nil {
		t.Fatal(err)
	}
	stub, err := kcpstub.Start(kcpstub.Options{ClientCAs: ca.Pool(), Certificate: kcpCert})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stub.Close)
	if err := stub.SetMode(kcpstub.Refusing); err != nil {
		t.Fatal(err)
	}
	caFile, certFile, keyFile, err := leaf.WriteFiles(t.TempDir(), ca)
	if err != nil {
		t.Fatal(err)
	}
	webhookAddr, healthAddr := testenv.FreeAddr(), testenv.FreeAddr()
	cmd := exec.Command(binary, "--kcp-addr", stub.Addr(), "--tls-cert-file", certFile, "--tls-key-file", keyFile,
		"--ca-file", caFile, "--listen-addr", webhookAddr, "--metrics-bind-address", testenv.FreeAddr(),
		"--health-probe-bind-address", healthAddr, "--request-timeout", "1s", "--retry-base-delay", "50ms",
		"--retry-max-delay", "200ms", "--drain-timeout", "60s", "--heartbeat-interval", "0")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	waited := make(chan struct{})
	go func() {
		exited <- cmd.Wait()
		close(waited)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-waited
	})

	readyz := func() int {
		resp, err := http.Get("http://" + healthAddr + "/readyz")
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	t.Cleanup(client.CloseIdleConnections)
	admit := func(i int) int {
		resp, err := client.Post("https://"+webhookAddr+contract.ValidatePath("lifecycle-manager"), "application/json",
			bytes.NewReader(updateReview(i)))
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	g.Eventually(readyz).WithTimeout(30 * time.Second).Should(gomega.Equal(http.StatusOK))
	g.Expect(admit(1)).To(gomega.Equal(http.StatusOK))

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	g.Eventually(readyz).WithTimeout(10 * time.Second).Should(gomega.Equal(http.StatusServiceUnavailable))
	g.Expect(admit(2)).To(gomega.Equal(http.StatusOK), "admission answered while draining")
	g.Consistently(exited).WithTimeout(300*time.Millisecond).ShouldNot(gomega.Receive(), "exited with the KCP down")

	if err := stub.SetMode(kcpstub.Serving); err != nil {
		t.Fatal(err)
	}
	var exitErr error
	g.Eventually(exited).WithTimeout(30 * time.Second).Should(gomega.Receive(&exitErr))
	g.Expect(exitErr).NotTo(gomega.HaveOccurred())
	kyma := func(name string) contract.WatchEvent {
		return contract.WatchEvent{
			Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: name},
			WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		}
	}
	for _, ev := range []contract.WatchEvent{kyma("kyma-1"), kyma("kyma-2"), {Resync: contract.ResyncStartup}} {
		// At least once: a retry may repeat a delivery the KCP already took.
		g.Expect(stub.Count("lifecycle-manager", ev)).To(gomega.BeNumerically(">=", 1), "%+v", ev)
	}
}
