package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func TestParseFlags(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ca, err := pki.NewCA("flags-ca")
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1"})
	if err != nil {
		t.Fatal(err)
	}
	leafFile := filepath.Join(dir, "leaf.crt")
	if err := os.WriteFile(leafFile, leaf.CertPEM, 0o600); err != nil {
		t.Fatal(err)
	}

	// Flags only: the environment is never read.
	for k, v := range map[string]string{"EXT_AUTHZ_KYMA_NAMESPACE": "from-env", "EXT_AUTHZ_API_TIMEOUT": "soon"} {
		t.Setenv(k, v)
	}
	ok := func(f func(*options) bool) func(*testing.T, *options) {
		return func(t *testing.T, o *options) {
			t.Helper()
			if !f(o) {
				t.Errorf("unexpected options %+v", o)
			}
		}
	}
	startuptest.Run(t, parseFlags, []startuptest.Case[*options]{
		{Name: "defaults", Check: ok(func(o *options) bool {
			return o.grpcAddr == ":9001" && o.metricsAddr == ":8080" && o.healthAddr == ":8081" &&
				o.kymaNamespace == "kcp-system" && o.kubeconfig == "" && o.caFile == "" && o.caInterval == 10*time.Second && o.apiTimeout == 10*time.Second
		})},
		{Name: "flags", Args: []string{"--grpc-addr=127.0.0.1:1", "--kyma-namespace=kyma", "--kubeconfig=" + kubeconfig, "--ca-file=" + caFile},
			Check: ok(func(o *options) bool {
				return o.grpcAddr == "127.0.0.1:1" && o.kymaNamespace == "kyma" && o.kubeconfig == kubeconfig && o.caFile == caFile
			})},
		{Name: "kubebuilder names", Args: []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:9091"},
			Check: ok(func(o *options) bool { return o.metricsAddr == ":9090" && o.healthAddr == ":9091" })},
		{Name: "deprecated aliases", Args: []string{"--metrics-addr=:9092", "--health-addr=:9093"},
			Check: ok(func(o *options) bool { return o.metricsAddr == ":9092" && o.healthAddr == ":9093" })},
		{Name: "the environment is not read", Check: ok(func(o *options) bool { return o.kymaNamespace == "kcp-system" && o.apiTimeout == 10*time.Second })},
		{Name: "version", Args: []string{"--version", "--kyma-namespace=NOT-VALIDATED"}, Check: ok(func(o *options) bool { return o.Version })},
		{Name: "bad namespace", Args: []string{"--kyma-namespace=KCP"}, WantErr: []string{"--kyma-namespace"}},
		{Name: "bad port", Args: []string{"--health-probe-bind-address=:http"}, WantErr: []string{"--health-probe-bind-address"}},
		{Name: "port out of range", Args: []string{"--metrics-bind-address=:70000"}, WantErr: []string{"--metrics-bind-address"}},
		{Name: "same address", Args: []string{"--grpc-addr=:9000", "--health-probe-bind-address=:9000"}, WantErr: []string{"must differ"}},
		{Name: "port 0 may repeat", Args: []string{"--grpc-addr=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"},
			Check: ok(func(o *options) bool { return o.grpcAddr == "127.0.0.1:0" })},
		{Name: "missing kubeconfig", Args: []string{"--kubeconfig=" + filepath.Join(dir, "nope")}, WantErr: []string{"--kubeconfig"}},
		{Name: "CA file without certificates", Args: []string{"--ca-file=" + kubeconfig}, WantErr: []string{"no PEM certificate"}},
		{Name: "CA file missing", Args: []string{"--ca-file=" + filepath.Join(dir, "nope")}, WantErr: []string{"--ca-file"}},
		{Name: "CA file with a leaf", Args: []string{"--ca-file=" + leafFile}, WantErr: []string{"not a CA certificate"}},
		{Name: "CA reload interval", Args: []string{"--ca-reload-interval=2s"}, Check: ok(func(o *options) bool { return o.caInterval == 2*time.Second })},
		{Name: "zero CA reload interval", Args: []string{"--ca-reload-interval=0s"}, WantErr: []string{"--ca-reload-interval"}},
		{Name: "stream bounds", Check: ok(func(o *options) bool { return o.maxStreams == 128 && o.maxConns == 64 && o.maxStreamsAll == 256 })},
		{Name: "max total streams", Args: []string{"--max-total-streams=512"}, Check: ok(func(o *options) bool { return o.maxStreamsAll == 512 })},
		{Name: "stream workers", Check: ok(func(o *options) bool { return o.streamWorkers == DefaultStreamWorkers })},
		{Name: "stream workers off", Args: []string{"--stream-workers=0"}, Check: ok(func(o *options) bool { return o.streamWorkers == 0 })},
		{Name: "stream workers negative", Args: []string{"--stream-workers=-1"}, WantErr: []string{"--stream-workers"}},
		{Name: "stream workers over total streams", Args: []string{"--max-total-streams=8", "--stream-workers=9"}, WantErr: []string{"--stream-workers"}},
		{Name: "stream workers default under few total streams", Args: []string{"--max-total-streams=8"}, Check: ok(func(o *options) bool { return o.streamWorkers == 8 })},
		{Name: "check timeout", Check: ok(func(o *options) bool { return o.checkTimeout == 2*time.Second })},
		{Name: "check timeout set", Args: []string{"--check-timeout=500ms"}, Check: ok(func(o *options) bool { return o.checkTimeout == 500*time.Millisecond })},
		{Name: "check timeout zero", Args: []string{"--check-timeout=0"}, WantErr: []string{"--check-timeout"}},
		{Name: "zero total streams", Args: []string{"--max-total-streams=0"}, WantErr: []string{"--max-total-streams"}},
		{Name: "zero timeout", Args: []string{"--api-timeout=0s"}, WantErr: []string{"positive"}},
		{Name: "every problem at once", Args: []string{"--kyma-namespace=KCP", "--api-timeout=0s", "--stream-workers=-1", "--dry-run-paths=v2", "--max-connections=0", "--grpc-addr=:x"},
			WantErr: []string{"--grpc-addr: Invalid value: \":x\"", "--kyma-namespace: Invalid value: \"KCP\"", "--api-timeout: Invalid value: \"0s\": must be positive",
				"--max-connections", "--stream-workers: Invalid value: -1", "--dry-run-paths: Invalid value: \"v2\""}},
		{Name: "rate limit defaults", Check: ok(func(o *options) bool {
			r := o.rateLimit.config
			return r.Mode == "enforce" && r.Default.Rate == 100 && r.Default.Burst == 10_000 && len(r.Classes) == 0 &&
				o.rateLimit.classLabel == ratelimit.DefaultClassLabel && r.MaxRuntimes == 200_000 && o.rateLimit.reportInterval == time.Minute
		})},
		{Name: "rate limit classes", Args: []string{"--rate-limit-mode=shadow", "--rate-limit=5/10", "--rate-limit-class-label=example.com/tier", "--rate-limit-classes=trial=1/2,big=1000/5000"},
			Check: ok(func(o *options) bool {
				r := o.rateLimit.config
				return r.Mode == "shadow" && r.Default.Rate == 5 && r.Default.Burst == 10 && o.rateLimit.classLabel == "example.com/tier" &&
					len(r.Classes) == 2 && r.Classes["trial"].Burst == 2 && r.Classes["big"].Rate == 1000
			})},
		{Name: "rate limit off", Args: []string{"--rate-limit-mode=off"}, Check: ok(func(o *options) bool { return o.rateLimit.mode == "off" })},
		{Name: "rate limit bad", Args: []string{"--rate-limit-mode=on", "--rate-limit=0/1", "--rate-limit-class-label=", "--rate-limit-classes=a=1/1",
			"--rate-limit-max-runtimes=0", "--rate-limit-report-interval=0s"},
			WantErr: []string{"--rate-limit-mode: Unsupported value: \"on\"", "--rate-limit: Invalid value: \"0/1\"", "--rate-limit-classes: Invalid value: \"a=1/1\": needs --rate-limit-class-label",
				"--rate-limit-max-runtimes", "--rate-limit-report-interval"}},
		{Name: "rate limit bad class label", Args: []string{"--rate-limit-class-label=a b"}, WantErr: []string{"--rate-limit-class-label"}},
		{Name: "positional argument", Args: []string{"serve"}, WantErr: []string{"unexpected arguments"}},
	})
}

func TestParseFlagsHelp(t *testing.T) {
	startuptest.Help(t, parseFlags, "ext-authz", "metrics-bind-address", "health-probe-bind-address", "metrics-addr", "version", "zap-log-level")
}
