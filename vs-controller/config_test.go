package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestParseConfig(t *testing.T) {
	base := []string{"--issuer-name", "runtime-ca", "--kcp-gateway-host", "gateway.kcp.example.com"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, c *config)
	}{
		{name: "defaults", args: base, check: func(t *testing.T, c *config) {
			o := c.o
			if o.MetricsBindAddress != ":8080" || o.HealthProbeBindAddress != ":8081" || o.LeaderElection {
				t.Errorf("manager defaults: %+v", o)
			}
			if o.Issuer.Name != "runtime-ca" || o.Issuer.Kind != "Issuer" || o.Issuer.Group != "cert-manager.io" {
				t.Errorf("issuer %+v", o.Issuer)
			}
			if o.Trust.CASecret != (types.NamespacedName{Namespace: "kcp-system", Name: "runtime-watcher-ca"}) ||
				o.Trust.GatewayClientCASecret != (types.NamespacedName{Namespace: "istio-system", Name: "kcp-gateway-tls-cacert"}) ||
				o.Trust.MigrationExtraCASecret.Name != "" {
				t.Errorf("trust %+v", o.Trust)
			}
			if o.Adoption.Ready != nil || o.ExtraDNSNames != nil || o.Bundle.WebhookIngressFrom != nil {
				t.Errorf("local aids set by default: %+v", o)
			}
			if c.qps != 50 || c.burst != 100 || o.SKRTimeout != 10*time.Second {
				t.Errorf("qps %v burst %d skr-timeout %s", c.qps, c.burst, o.SKRTimeout)
			}
		}},
		{name: "kubebuilder flag names", args: with("--metrics-bind-address", ":9090", "--health-probe-bind-address", ":9091", "--leader-elect", "--kubeconfig", "/dev/null"),
			check: func(t *testing.T, c *config) {
				if c.o.MetricsBindAddress != ":9090" || c.o.HealthProbeBindAddress != ":9091" || !c.o.LeaderElection {
					t.Errorf("%+v", c.o)
				}
			}},
		{name: "local aids", args: with("--issuer-kind", "ClusterIssuer", "--skr-webhook-extra-dns-names", " localhost, ,127.0.0.1.nip.io", "--skr-webhook-ready-url", "https://localhost:18443", "--ca-secret", "other/ca", "--skr-webhook-ingress-from", "gardener"),
			check: func(t *testing.T, c *config) {
				if c.o.Issuer.Kind != "ClusterIssuer" || strings.Join(c.o.ExtraDNSNames, "|") != "localhost|127.0.0.1.nip.io" || c.o.Adoption.Ready == nil {
					t.Errorf("%+v", c.o)
				}
				if c.o.Trust.CASecret != (types.NamespacedName{Namespace: "other", Name: "ca"}) || len(c.o.Bundle.WebhookIngressFrom) == 0 {
					t.Errorf("%+v %v", c.o.Trust, c.o.Bundle.WebhookIngressFrom)
				}
			}},
		{name: "rotation off", args: with("--ca-secret", "", "--gateway-client-ca-secret", ""), check: func(t *testing.T, c *config) {
			if c.o.Trust.CASecret.Name != "" || c.o.Trust.GatewayClientCASecret.Name != "" {
				t.Errorf("%+v", c.o.Trust)
			}
		}},
		{name: "version skips validation", args: []string{"--version", "--issuer-kind", "Nope"}, check: func(t *testing.T, c *config) {
			if !c.Version {
				t.Error("Version not set")
			}
		}},
		{name: "no issuer", args: []string{"--kcp-gateway-host", "kcp"}, wantErr: "--issuer-name and --kcp-gateway-host are required"},
		{name: "no gateway host", args: []string{"--issuer-name", "ca"}, wantErr: "--issuer-name and --kcp-gateway-host are required"},
		{name: "issuer kind", args: with("--issuer-kind", "Certificate"), wantErr: "--issuer-kind must be Issuer or ClusterIssuer"},
		{name: "ingress from", args: with("--skr-webhook-ingress-from", "everyone"), wantErr: "--skr-webhook-ingress-from"},
		{name: "gateway port", args: with("--kcp-gateway-host", "kcp:http"), wantErr: "--kcp-gateway-host"},
		{name: "object key", args: with("--gateway-ca-secret", "a/b/c"), wantErr: "--gateway-ca-secret"},
		{name: "object key without name", args: with("--ca-secret", "ns/"), wantErr: "--ca-secret"},
		{name: "migration window without rotation", args: with("--migration-extra-ca-secret", "istio-system/klm-watcher", "--ca-secret", ""), wantErr: "--migration-extra-ca-secret needs"},
		{name: "bad duration", args: with("--skr-resync", "often"), wantErr: "invalid value"},
		{name: "unknown flag", args: with("--metrics-addr", ":1"), wantErr: "flag provided but not defined"},
		{name: "argument", args: with("run"), wantErr: "unexpected arguments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parseConfig(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
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
		var out bytes.Buffer
		if _, err := parseConfig([]string{arg}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", arg, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: vs-controller [flags]") || !strings.Contains(out.String(), "-kubeconfig") {
			t.Errorf("%s: usage\n%s", arg, out.String())
		}
	}
}
