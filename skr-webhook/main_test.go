package main

import (
	"bytes"
	"errors"
	"flag"
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
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
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
	base := []string{"--tls-cert-file", f.cert, "--tls-key-file", f.key, "--ca-file", f.ca}
	tests := []struct {
		name  string
		args  []string
		env   map[string]string
		check func(t *testing.T, c *config)
		err   []string // substrings of the error
	}{
		{
			name: "defaults; client pair is the serving pair",
			args: append(base, "--kcp-addr", "kcp.example.com"),
			check: func(t *testing.T, c *config) {
				if c.listenAddr != ":8443" || c.metricsAddr != ":2112" || c.healthAddr != ":8081" {
					t.Errorf("addresses %s %s %s", c.listenAddr, c.metricsAddr, c.healthAddr)
				}
				if c.clientCertFile != f.cert || c.clientKeyFile != f.key {
					t.Errorf("client pair %s %s", c.clientCertFile, c.clientKeyFile)
				}
				if c.queueSize != 10000 || c.workers != 16 || c.maxRetryAge != time.Hour {
					t.Errorf("queue %d workers %d age %v", c.queueSize, c.workers, c.maxRetryAge)
				}
				if c.heartbeatInterval != 5*time.Minute || c.managersFile != "" {
					t.Errorf("heartbeat %v managers file %q", c.heartbeatInterval, c.managersFile)
				}
			},
		},
		{
			name: "the environment is not read",
			args: append(base, "--kcp-addr", "kcp:443", "--workers", "3"),
			env:  map[string]string{"KCP_ADDR": "other:443", "WORKERS": "7", "QUEUE_SIZE": "many", "MAX_RETRY_AGE": "1m"},
			check: func(t *testing.T, c *config) {
				if c.kcpAddr != "kcp:443" || c.workers != 3 || c.queueSize != 10000 || c.maxRetryAge != time.Hour {
					t.Errorf("%+v", c)
				}
			},
		},
		{
			name: "kubebuilder names and their deprecated aliases",
			args: append(base, "--kcp-addr", "kcp", "--metrics-bind-address", ":9090", "--health-addr", ":9091"),
			check: func(t *testing.T, c *config) {
				if c.metricsAddr != ":9090" || c.healthAddr != ":9091" {
					t.Errorf("addresses %s %s", c.metricsAddr, c.healthAddr)
				}
			},
		},
		{
			name:  "version needs no other flag",
			args:  []string{"--version"},
			check: func(t *testing.T, c *config) { t.Helper(); gomega.NewWithT(t).Expect(c.Version).To(gomega.BeTrue()) },
		},
		{
			name: "separate client pair",
			args: append(base, "--kcp-addr", "kcp", "--client-cert-file", f.cert2, "--client-key-file", f.key2),
			check: func(t *testing.T, c *config) {
				if c.clientCertFile != f.cert2 || c.clientKeyFile != f.key2 {
					t.Errorf("client pair %s %s", c.clientCertFile, c.clientKeyFile)
				}
			},
		},
		{name: "kcp-addr required", args: base, env: map[string]string{"KCP_ADDR": "kcp"}, err: []string{"--kcp-addr is required"}},
		{name: "kcp-addr with scheme", args: append(base, "--kcp-addr", "https://kcp"), err: []string{"--kcp-addr", "host[:port]"}},
		{
			name: "missing files are named",
			args: []string{"--kcp-addr", "kcp", "--tls-cert-file", "/nope/tls.crt", "--tls-key-file", f.key},
			err:  []string{"--tls-cert-file: open /nope/tls.crt: no such file", "--ca-file: required"},
		},
		{
			name: "empty file and directory",
			args: []string{"--kcp-addr", "kcp", "--tls-cert-file", empty, "--tls-key-file", f.key, "--ca-file", f.dir},
			err:  []string{"--tls-cert-file: " + empty + " is empty", "--ca-file: " + f.dir + " is a directory"},
		},
		{
			name: "half a client pair",
			args: append(base, "--kcp-addr", "kcp", "--client-cert-file", f.cert2),
			err:  []string{"--client-cert-file and --client-key-file go together"},
		},
		{
			name: "bad numbers",
			args: append(base, "--kcp-addr", "kcp", "--queue-size", "0", "--workers", "0", "--request-timeout", "0s"),
			err:  []string{"--queue-size", "--workers", "--request-timeout"},
		},
		{name: "stray argument", args: append(base, "--kcp-addr", "kcp", "extra"), err: []string{"unexpected arguments"}},
		{
			name: "heartbeats off, managers file",
			args: append(base, "--kcp-addr", "kcp", "--heartbeat-interval", "0", "--managers-file", empty),
			check: func(t *testing.T, c *config) {
				if c.heartbeatInterval != 0 || c.managersFile != empty || c.dispatcherConfig().HeartbeatInterval != 0 {
					t.Errorf("heartbeat %v managers file %q", c.heartbeatInterval, c.managersFile)
				}
			},
		},
		{
			name: "managers bound: 1,024 by default (a KCP with 1,000 Watchers), settable",
			args: append(base, "--kcp-addr", "kcp"),
			check: func(t *testing.T, c *config) {
				if c.dispatcherConfig().MaxManagers != 1024 {
					t.Errorf("max managers %d", c.dispatcherConfig().MaxManagers)
				}
				c2, err := parseConfig(append(append([]string{}, base...), "--kcp-addr", "kcp", "--max-managers", "3000"), io.Discard)
				if err != nil || c2.dispatcherConfig().MaxManagers != 3000 {
					t.Errorf("--max-managers 3000: %v", err)
				}
			},
		},
		{name: "bad managers bound", args: append(base, "--kcp-addr", "kcp", "--max-managers", "0"), err: []string{"--max-managers must be between 1 and 65536"}},
		{
			name: "bad heartbeat and managers file",
			args: append(base, "--kcp-addr", "kcp", "--heartbeat-interval", "-1s", "--managers-file", "/nope/managers"),
			err:  []string{"--heartbeat-interval must not be negative", "--managers-file: open /nope/managers"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			c, err := parseConfig(tt.args, io.Discard)
			if len(tt.err) > 0 {
				if err == nil {
					t.Fatalf("no error, want %q", tt.err)
				}
				for _, s := range tt.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, c)
		})
	}
}

func TestParseConfigHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out strings.Builder
		if _, err := parseConfig([]string{arg}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", arg, err)
		}
		for _, want := range []string{"Usage: skr-webhook", "-metrics-bind-address", "-health-probe-bind-address", "-version"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s output lacks %q", arg, want)
			}
		}
	}
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
	// (certwatcher) together.
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
	if n, err := testutil.GatherAndCount(ctrlmetrics.Registry, "certwatcher_read_certificate_total"); err != nil || n == 0 {
		t.Errorf("certwatcher metrics: %d series, %v", n, err)
	}
	if err := env.stop(); err != nil {
		t.Fatal(err)
	}
	if code := get(health + "/readyz"); code == http.StatusOK {
		t.Fatal("ready after shutdown")
	}
}
