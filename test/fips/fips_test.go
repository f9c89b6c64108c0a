package fips_test

import (
	"context"
	"crypto/tls"
	"debug/buildinfo"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFIPSBinariesMTLS starts ext-authz and skr-webhook with their defaults
// (no GODEBUG), skr-webhook with --min-tls-version=1.3, and sends one SKR
// change through the gateway (Envoy): both binaries are built with FIPS
// mode on by default (TestBinariesCarryTheCertifiedModule), the webhook's mTLS handshake is TLS 1.3 with a
// FIPS-approved suite, ext-authz allows the event, and both binaries'
// metrics show FIPS mode.
func TestFIPSBinariesMTLS(t *testing.T) {
	testenv.SkipIfShort(t)
	g := gomega.NewWithT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	t.Setenv("GODEBUG", "") // the binaries run with their built-in defaults

	authzBin, err := testenv.BuildBinary("ext-authz")
	must(t, err)
	webhookBin, err := testenv.BuildBinary("skr-webhook")
	must(t, err)
	env, err := testenv.Start("kcp")
	must(t, err)
	defer func() { _ = env.Stop() }()
	kcp := env.Cluster("kcp")
	must(t, kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kcp-system"}}))
	must(t, kcp.Client.Create(ctx, extauthz.Kyma("kcp-system", "runtime-1", "skr1.example.com", map[string]string{contract.LabelRuntimeID: "runtime-1"})))

	authz, err := extauthz.Start(authzBin, testWriter{t}, time.Minute, "--kubeconfig="+kcp.KubeconfigPath)
	must(t, err)
	defer func() { _ = authz.Stop(15 * time.Second) }()
	must(t, authz.WaitReady(ctx))

	ca, err := pki.NewCA("fips-ca")
	must(t, err)
	gwLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "kcp-gateway", DNSNames: []string{"localhost"}})
	must(t, err)
	skrLeaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	must(t, err)

	// Upstream: what the listener would get.
	events := make(chan http.Header, 16)
	up := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == contract.EventPath("lifecycle-manager") {
			events <- r.Header.Clone()
		}
	}), ReadHeaderTimeout: time.Second}
	upLn, err := net.Listen("tcp", "127.0.0.1:0")
	must(t, err)
	go func() { _ = up.Serve(upLn) }()
	defer func() { _ = up.Close() }()

	// The gateway: Envoy with the listener, route and clusters istiod
	// generates for the kcp-gateway; its statistics count each handshake's
	// version and cipher suite.
	gw, gwPort := envoy.StartEdge(t, envoy.NewEdge(authz.GRPCAddr, upLn.Addr().String(), gwLeaf, ca))

	// skr-webhook, TLS 1.3 only towards the KCP.
	dir := t.TempDir()
	caFile, certFile, keyFile, err := skrLeaf.WriteFiles(dir, ca)
	must(t, err)
	listenAddr, metricsAddr, healthAddr := testenv.FreeAddr(), testenv.FreeAddr(), testenv.FreeAddr()
	cmd := exec.Command(webhookBin, "--listen-addr", listenAddr, "--metrics-bind-address", metricsAddr, "--health-probe-bind-address", healthAddr,
		"--tls-cert-file", certFile, "--tls-key-file", keyFile, "--ca-file", caFile, "--kcp-addr", "localhost:"+strconv.Itoa(gwPort),
		"--min-tls-version", "1.3", "--heartbeat-interval", "0")
	cmd.Stdout, cmd.Stderr = testWriter{t}, testWriter{t}
	must(t, cmd.Start())
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	g.Eventually(func() int { return get("http://" + healthAddr + "/readyz") }).WithTimeout(30 * time.Second).Should(gomega.Equal(http.StatusOK))

	// One SKR change: the API server's admission review, over TLS to the webhook.
	review := `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"42",
	  "kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},
	  "operation":"UPDATE","namespace":"kyma-system","name":"default",
	  "oldObject":{"metadata":{"name":"default","namespace":"kyma-system"},"spec":{"channel":"regular"}},
	  "object":{"metadata":{"name":"default","namespace":"kyma-system"},"spec":{"channel":"fast"}}}}`
	admission := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool(), MinVersion: tls.VersionTLS12}}}
	resp, err := admission.Post("https://"+listenAddr+contract.ValidatePath("lifecycle-manager"), "application/json", strings.NewReader(review))
	must(t, err)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("admission answered %d", resp.StatusCode)
	}

	// Through the gateway: the client certificate was runtime-1's and
	// ext-authz allowed it as runtime-1.
	select {
	case h := <-events:
		if got := h.Get(contract.HeaderRuntimeID); got != "runtime-1" {
			t.Errorf("upstream %s = %q, want runtime-1", contract.HeaderRuntimeID, got)
		}
		if got, want := h.Get(contract.HeaderXFCC), envoy.XFCC(skrLeaf.Cert); got != want {
			t.Errorf("upstream XFCC %q, want runtime-1's certificate %q", got, want)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event reached the upstream within 30s")
	}
	// Every handshake at the gateway (Envoy's listener statistics
	// listener.<address>.ssl.versions.<version> and .ssl.ciphers.<suite>):
	// TLS 1.3 with a FIPS-approved suite.
	stats, err := gw.Admin.Stats(ctx, `^listener\..*\.ssl\.(versions|ciphers|handshake)`)
	must(t, err)
	handshakes := stats.Sum(".ssl.handshake")
	if handshakes == 0 {
		t.Errorf("no handshake counted: %v", stats)
	}
	if v13 := stats.Sum(".ssl.versions.TLSv1.3"); v13 != handshakes {
		t.Errorf("%d handshakes, %d of them TLS 1.3: %v", handshakes, v13, stats)
	}
	if fips := stats.Sum(".ssl.ciphers.TLS_AES_128_GCM_SHA256") + stats.Sum(".ssl.ciphers.TLS_AES_256_GCM_SHA384"); fips != handshakes {
		t.Errorf("%d handshakes, %d of them with a FIPS-approved suite: %v", handshakes, fips, stats)
	}

	for _, m := range []struct{ url, name string }{
		{"http://" + authz.MetricsAddr + "/metrics", "runtime_watcher_ext_authz_fips140_enabled"},
		{"http://" + metricsAddr + "/metrics", "runtime_watcher_skr_webhook_fips140_enabled"},
	} {
		text, err := promtext.Fetch(ctx, m.url)
		must(t, err)
		if v, found := promtext.Sum(text, m.name, nil); !found || v != 1 {
			t.Errorf("%s = %v (found %v), want 1", m.name, v, found)
		}
	}
}

// buildSetting is the value of key in the build information of the binary
// at path (what `go version -m` prints as "build key=value").
func buildSetting(t *testing.T, path, key string) string {
	t.Helper()
	info, err := buildinfo.ReadFile(path)
	must(t, err)
	for _, s := range info.Settings {
		if s.Key == key {
			return s.Value
		}
	}
	return ""
}

func get(url string) int {
	resp, err := http.Get(url) //nolint:gosec,noctx // the test's own loopback address
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// testWriter sends a binary's output to the test log.
type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
