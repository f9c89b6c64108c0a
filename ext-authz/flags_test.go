package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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

	tests := []struct {
		name    string
		args    []string
		env     map[string]string
		check   func(*options) bool
		wantErr string
	}{
		{name: "defaults", check: func(o *options) bool {
			return o.grpcAddr == ":9001" && o.metricsAddr == ":8080" && o.healthAddr == ":8081" &&
				o.kymaNamespace == "kcp-system" && o.kubeconfig == "" && o.caFile == "" && o.caBundle == nil && o.caInterval == 10*time.Second && o.apiTimeout == 10*time.Second
		}},
		{name: "flags", args: []string{"--grpc-addr=127.0.0.1:1", "--kyma-namespace=kyma", "--kubeconfig=" + kubeconfig, "--ca-file=" + caFile},
			check: func(o *options) bool {
				return o.grpcAddr == "127.0.0.1:1" && o.kymaNamespace == "kyma" && o.kubeconfig == kubeconfig && o.caBundle != nil && len(o.caBundle.CAs) == 1
			}},
		{name: "kubebuilder names", args: []string{"--metrics-bind-address=:9090", "--health-probe-bind-address=:9091"},
			check: func(o *options) bool { return o.metricsAddr == ":9090" && o.healthAddr == ":9091" }},
		{name: "deprecated aliases", args: []string{"--metrics-addr=:9092", "--health-addr=:9093"},
			check: func(o *options) bool { return o.metricsAddr == ":9092" && o.healthAddr == ":9093" }},
		{name: "the environment is not read", env: map[string]string{"EXT_AUTHZ_KYMA_NAMESPACE": "from-env", "EXT_AUTHZ_API_TIMEOUT": "soon"},
			check: func(o *options) bool { return o.kymaNamespace == "kcp-system" && o.apiTimeout == 10*time.Second }},
		{name: "version", args: []string{"--version", "--kyma-namespace=NOT-VALIDATED"}, check: func(o *options) bool { return o.Version }},
		{name: "bad namespace", args: []string{"--kyma-namespace=KCP"}, wantErr: "--kyma-namespace"},
		{name: "bad port", args: []string{"--health-probe-bind-address=:http"}, wantErr: "--health-probe-bind-address"},
		{name: "port out of range", args: []string{"--metrics-bind-address=:70000"}, wantErr: "--metrics-bind-address"},
		{name: "same address", args: []string{"--grpc-addr=:9000", "--health-probe-bind-address=:9000"}, wantErr: "must differ"},
		{name: "port 0 may repeat", args: []string{"--grpc-addr=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0"},
			check: func(o *options) bool { return o.grpcAddr == "127.0.0.1:0" }},
		{name: "missing kubeconfig", args: []string{"--kubeconfig=" + filepath.Join(dir, "nope")}, wantErr: "--kubeconfig"},
		{name: "CA file without certificates", args: []string{"--ca-file=" + kubeconfig}, wantErr: "no PEM certificate"},
		{name: "CA file missing", args: []string{"--ca-file=" + filepath.Join(dir, "nope")}, wantErr: "--ca-file"},
		{name: "CA file with a leaf", args: []string{"--ca-file=" + leafFile}, wantErr: "not a CA certificate"},
		{name: "CA reload interval", args: []string{"--ca-reload-interval=2s"}, check: func(o *options) bool { return o.caInterval == 2*time.Second }},
		{name: "zero CA reload interval", args: []string{"--ca-reload-interval=0s"}, wantErr: "--ca-reload-interval"},
		{name: "stream bounds", check: func(o *options) bool { return o.maxStreams == 128 && o.maxConns == 64 && o.maxStreamsAll == 256 }},
		{name: "max total streams", args: []string{"--max-total-streams=512"}, check: func(o *options) bool { return o.maxStreamsAll == 512 }},
		{name: "stream workers", check: func(o *options) bool { return o.streamWorkers == DefaultStreamWorkers }},
		{name: "stream workers off", args: []string{"--stream-workers=0"}, check: func(o *options) bool { return o.streamWorkers == 0 }},
		{name: "stream workers negative", args: []string{"--stream-workers=-1"}, wantErr: "--stream-workers"},
		{name: "stream workers over total streams", args: []string{"--max-total-streams=8", "--stream-workers=9"}, wantErr: "--stream-workers"},
		{name: "stream workers default under few total streams", args: []string{"--max-total-streams=8"}, check: func(o *options) bool { return o.streamWorkers == 8 }},
		{name: "check timeout", check: func(o *options) bool { return o.checkTimeout == 2*time.Second }},
		{name: "check timeout set", args: []string{"--check-timeout=500ms"}, check: func(o *options) bool { return o.checkTimeout == 500*time.Millisecond }},
		{name: "check timeout zero", args: []string{"--check-timeout=0"}, wantErr: "--check-timeout"},
		{name: "zero total streams", args: []string{"--max-total-streams=0"}, wantErr: "--max-total-streams"},
		{name: "zero timeout", args: []string{"--api-timeout=0s"}, wantErr: "positive"},
		{name: "positional argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			o, err := parseFlags(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("want an error with %q, got %v", tt.wantErr, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !tt.check(o) {
				t.Fatalf("unexpected options %+v", o)
			}
		})
	}
}

func TestParseFlagsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out strings.Builder
		_, err := parseFlags([]string{arg}, &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", arg, err)
		}
		for _, want := range []string{"Usage: ext-authz", "-metrics-bind-address", "-health-probe-bind-address", "-version", "deprecated: use --metrics-bind-address"} {
			if !strings.Contains(out.String(), want) {
				t.Errorf("%s output lacks %q:\n%s", arg, want, out.String())
			}
		}
	}
}
