package main

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// files writes a CA, a serving/client pair and a second pair into a temp dir.
type files struct {
	dir, ca, cert, key, cert2, key2 string
}

func writeFiles(t testing.TB) files {
	t.Helper()
	ca, err := pki.NewCA("test-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"localhost"}, IPs: []net.IP{net.IPv4(127, 0, 0, 1)}})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, certFile, keyFile, err := leaf.WriteFiles(dir, ca)
	if err != nil {
		t.Fatal(err)
	}
	other, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1"})
	if err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "client")
	if err := os.Mkdir(sub, 0o700); err != nil {
		t.Fatal(err)
	}
	_, cert2, key2, err := other.WriteFiles(sub, ca)
	if err != nil {
		t.Fatal(err)
	}
	return files{dir: dir, ca: caFile, cert: certFile, key: keyFile, cert2: cert2, key2: key2}
}

func TestParseConfig(t *testing.T) {
	f := writeFiles(t)
	empty := filepath.Join(f.dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// Flags only: the environment is never read.
	for k, v := range map[string]string{"KCP_ADDR": "other:443", "WORKERS": "7", "QUEUE_SIZE": "many", "MAX_RETRY_AGE": "1m"} {
		t.Setenv(k, v)
	}
	base := []string{"--tls-cert-file", f.cert, "--tls-key-file", f.key, "--ca-file", f.ca}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	startuptest.Run(t, parseConfig, []startuptest.Case[*config]{
		{
			Name: "defaults; client pair is the serving pair",
			Args: with("--kcp-addr", "kcp.example.com"),
			Check: func(t *testing.T, c *config) {
				if c.listenAddr != ":8443" || c.metricsAddr != ":2112" || c.healthAddr != ":8081" {
					t.Errorf("addresses %s %s %s", c.listenAddr, c.metricsAddr, c.healthAddr)
				}
				if c.clientCertFile != f.cert || c.clientKeyFile != f.key {
					t.Errorf("client pair %s %s", c.clientCertFile, c.clientKeyFile)
				}
				if c.queueSize != 10000 || c.workers != 16 || c.maxRetryAge != time.Hour {
					t.Errorf("queue %d workers %d age %v", c.queueSize, c.workers, c.maxRetryAge)
				}
				if c.heartbeatInterval != 5*time.Minute || c.managersFile != "" || c.minTLSVersion != tls.VersionTLS12 {
					t.Errorf("heartbeat %v managers file %q TLS %x", c.heartbeatInterval, c.managersFile, c.minTLSVersion)
				}
			},
		},
		{
			Name: "the environment is not read",
			Args: with("--kcp-addr", "kcp:443", "--workers", "3"),
			Check: func(t *testing.T, c *config) {
				if c.kcpAddr != "kcp:443" || c.workers != 3 || c.queueSize != 10000 || c.maxRetryAge != time.Hour {
					t.Errorf("%+v", c)
				}
			},
		},
		{
			Name: "kubebuilder names and their deprecated aliases",
			Args: with("--kcp-addr", "kcp", "--metrics-bind-address", ":9090", "--health-addr", ":9091", "--min-tls-version", "1.3"),
			Check: func(t *testing.T, c *config) {
				if c.metricsAddr != ":9090" || c.healthAddr != ":9091" || c.minTLSVersion != tls.VersionTLS13 {
					t.Errorf("addresses %s %s TLS %x", c.metricsAddr, c.healthAddr, c.minTLSVersion)
				}
			},
		},
		{
			Name:  "version needs no other flag",
			Args:  []string{"--version"},
			Check: func(t *testing.T, c *config) { t.Helper(); gomega.NewWithT(t).Expect(c.Version).To(gomega.BeTrue()) },
		},
		{
			Name: "separate client pair",
			Args: with("--kcp-addr", "kcp", "--client-cert-file", f.cert2, "--client-key-file", f.key2),
			Check: func(t *testing.T, c *config) {
				if c.clientCertFile != f.cert2 || c.clientKeyFile != f.key2 {
					t.Errorf("client pair %s %s", c.clientCertFile, c.clientKeyFile)
				}
			},
		},
		{Name: "kcp-addr required", Args: base, WantErr: []string{"--kcp-addr: Required value"}},
		{Name: "kcp-addr with scheme", Args: with("--kcp-addr", "https://kcp"), WantErr: []string{"--kcp-addr: Invalid value: \"https://kcp\": kcp address \"https://kcp\": want host[:port]"}},
		{
			Name:    "missing files are named",
			Args:    []string{"--kcp-addr", "kcp", "--tls-cert-file", "/nope/tls.crt", "--tls-key-file", f.key},
			WantErr: []string{"--tls-cert-file: Invalid value: \"/nope/tls.crt\": open /nope/tls.crt: no such file", "--ca-file: Required value"},
		},
		{
			Name:    "empty file and directory",
			Args:    []string{"--kcp-addr", "kcp", "--tls-cert-file", empty, "--tls-key-file", f.key, "--ca-file", f.dir},
			WantErr: []string{empty + " is empty", f.dir + " is a directory"},
		},
		{
			Name:    "half a client pair",
			Args:    with("--kcp-addr", "kcp", "--client-cert-file", f.cert2),
			WantErr: []string{"--client-cert-file and --client-key-file go together", "--client-key-file: Required value"},
		},
		{
			Name:    "every problem at once",
			Args:    with("--kcp-addr", "kcp", "--queue-size", "0", "--workers", "0", "--request-timeout", "0s", "--min-tls-version", "1.1"),
			WantErr: []string{`--min-tls-version: Unsupported value: "1.1"`, "--queue-size", "--workers", "--request-timeout"},
		},
		{
			Name: "every flag checked",
			Args: with("--kcp-addr", "kcp", "--otlp-traces-endpoint", "ftp://x", "--max-reviews-in-flight", "65", "--max-retry-age", "0", "--retry-base-delay", "0",
				"--retry-max-delay", "0", "--drain-timeout", "0", "--cert-poll-interval", "0", "--object-interval", "-1s"),
			WantErr: []string{"--otlp-traces-endpoint", "--max-reviews-in-flight", "--max-retry-age", "--retry-base-delay", "--retry-max-delay", "--drain-timeout",
				"--cert-poll-interval", "--object-interval"},
		},
		{Name: "stray argument", Args: with("--kcp-addr", "kcp", "extra"), WantErr: []string{"unexpected arguments"}},
		{
			Name: "heartbeats off, managers file",
			Args: with("--kcp-addr", "kcp", "--heartbeat-interval", "0", "--managers-file", empty),
			Check: func(t *testing.T, c *config) {
				if c.heartbeatInterval != 0 || c.managersFile != empty || c.dispatcherConfig().HeartbeatInterval != 0 {
					t.Errorf("heartbeat %v managers file %q", c.heartbeatInterval, c.managersFile)
				}
			},
		},
		{
			Name: "managers bound: 1,024 by default (a KCP with 1,000 Watchers), settable",
			Args: with("--kcp-addr", "kcp"),
			Check: func(t *testing.T, c *config) {
				if c.dispatcherConfig().MaxManagers != 1024 {
					t.Errorf("max managers %d", c.dispatcherConfig().MaxManagers)
				}
				c2, err := parseConfig(with("--kcp-addr", "kcp", "--max-managers", "3000"), io.Discard)
				if err != nil || c2.dispatcherConfig().MaxManagers != 3000 {
					t.Errorf("--max-managers 3000: %v", err)
				}
			},
		},
		{Name: "bad managers bound", Args: with("--kcp-addr", "kcp", "--max-managers", "0"), WantErr: []string{"--max-managers: Invalid value: 0: must be from 1 to 65536"}},
		{
			Name:    "bad heartbeat and managers file",
			Args:    with("--kcp-addr", "kcp", "--heartbeat-interval", "-1s", "--managers-file", "/nope/managers"),
			WantErr: []string{"--heartbeat-interval: Invalid value: \"-1s\": must not be negative", "--managers-file: Invalid value: \"/nope/managers\": open /nope/managers"},
		},
	})
}

func TestParseConfigHelp(t *testing.T) {
	startuptest.Help(t, parseConfig, "skr-webhook", "metrics-bind-address", "health-probe-bind-address", "version", "zap-log-level")
}

func TestNewAppRejectsUnusableCertificates(t *testing.T) {
	f := writeFiles(t)
	cfg := func(cert, key, ca string) *config {
		c, err := parseConfig([]string{"--kcp-addr", "127.0.0.1:1", "--tls-cert-file", cert, "--tls-key-file", key,
			"--ca-file", ca, "--listen-addr", "127.0.0.1:0", "--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0"},
			io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tt := range []struct {
		name string
		c    *config
		want string
	}{
		{"key of another certificate", cfg(f.cert, f.key2, f.ca), "loading --tls-cert-file"},
		{"CA file without a certificate", cfg(f.cert, f.key, f.key), "--ca-file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, err := newApp(tt.c, logr.Discard())
			if err == nil {
				a.closeListeners()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q lacks %q", err, tt.want)
			}
		})
	}
}

func TestAppLifecycle(t *testing.T) {
	env := startBenchApp(t, kcpstub.Serving) // the warm-up request already emitted kyma-0
	health := "http://" + env.app.healthLn.Addr().String()
	get := func(url string) int {
		resp, err := http.Get(url)
		if err != nil {
			return 0
		}
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	if code := get(health + "/readyz"); code != http.StatusOK {
		t.Fatalf("readyz %d", code)
	}
	if code := get(health + "/healthz"); code != http.StatusOK {
		t.Fatalf("healthz %d", code)
	}
	resp, err := env.client.Post(env.url, "application/json", bytes.NewReader(updateReview(1)))
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	for _, name := range []string{"kyma-0", "kyma-1"} {
		ev := contract.WatchEvent{
			Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: name},
			WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
		}
		gomega.NewWithT(t).Eventually(func() int { return env.stub.Count("lifecycle-manager", ev) }).
			WithTimeout(10*time.Second).Should(gomega.Equal(1), name)
	}
	// /metrics serves the webhook's registry and controller-runtime's
	// together.
	metrics := "http://" + env.app.metricsLn.Addr().String() + "/metrics"
	if err := testutil.ScrapeAndCompare(metrics, strings.NewReader(`
# HELP runtime_watcher_skr_webhook_events_delivered_total Change events the KCP answered with 2xx.
# TYPE runtime_watcher_skr_webhook_events_delivered_total counter
runtime_watcher_skr_webhook_events_delivered_total 2
# HELP runtime_watcher_skr_webhook_queue_depth Deliveries owed: pending entries (new or waiting to retry, resyncs and heartbeats included) plus in-flight ones changed meanwhile.
# TYPE runtime_watcher_skr_webhook_queue_depth gauge
runtime_watcher_skr_webhook_queue_depth 0
`), "runtime_watcher_skr_webhook_events_delivered_total", "runtime_watcher_skr_webhook_queue_depth"); err != nil {
		t.Error(err)
	}
	if err := testutil.GatherAndCompare(env.app.registry, strings.NewReader(`
# HELP runtime_watcher_skr_webhook_admission_requests_total Admission requests by manager, operation and result (emitted, unchanged, dry_run, connect, other_subresource, overflow, bad_request, too_large, not_found, method_not_allowed).
# TYPE runtime_watcher_skr_webhook_admission_requests_total counter
runtime_watcher_skr_webhook_admission_requests_total{manager="lifecycle-manager",operation="UPDATE",result="emitted"} 2
`), "runtime_watcher_skr_webhook_admission_requests_total"); err != nil {
		t.Error(err)
	}
	// A broken ca.crt keeps the trust in use and is counted once; the
	// content in use again is no reload. Each content replaces the file
	// at once, as the kubelet swaps a mounted Secret: written in place, the
	// watcher may also read the truncated, empty file between the two
	// steps and rightly count a second error (CI at 0208066 did).
	caPEM, err := os.ReadFile(env.app.cfg.caFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, data := range [][]byte{[]byte("garbage"), caPEM} {
		next := env.app.cfg.caFile + ".next"
		if err := os.WriteFile(next, data, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(next, env.app.cfg.caFile); err != nil {
			t.Fatal(err)
		}
		if env.app.caFile.Reload() {
			t.Fatalf("ca.crt %q was loaded", data)
		}
	}
	if err := testutil.GatherAndCompare(env.app.registry, strings.NewReader(`
# HELP runtime_watcher_skr_webhook_file_reloads_total Reads of a changed file (serving-certificate, client-certificate, ca-file, managers-file): ok (the new content is in use) or error (unreadable or unusable; what was in use stays).
# TYPE runtime_watcher_skr_webhook_file_reloads_total counter
runtime_watcher_skr_webhook_file_reloads_total{file="ca-file",result="error"} 1
runtime_watcher_skr_webhook_file_reloads_total{file="ca-file",result="ok"} 0
runtime_watcher_skr_webhook_file_reloads_total{file="serving-certificate",result="error"} 0
runtime_watcher_skr_webhook_file_reloads_total{file="serving-certificate",result="ok"} 0
`), "runtime_watcher_skr_webhook_file_reloads_total"); err != nil {
		t.Error(err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	if code := get(health + "/readyz"); code == http.StatusOK {
		t.Fatal("ready after shutdown")
	}
}
