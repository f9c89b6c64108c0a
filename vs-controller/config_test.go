package main

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
)

func TestParseConfig(t *testing.T) {
	base := []string{"--issuer-name", "runtime-ca", "--kcp-gateway-host", "gateway.kcp.example.com"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	startuptest.Run(t, parseConfig, []startuptest.Case[*config]{
		{Name: "defaults", Args: base, Check: func(t *testing.T, c *config) {
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
		{Name: "kubebuilder flag names", Args: with("--metrics-bind-address", ":9090", "--health-probe-bind-address", ":9091", "--leader-elect", "--kubeconfig", "/dev/null"),
			Check: func(t *testing.T, c *config) {
				if c.o.MetricsBindAddress != ":9090" || c.o.HealthProbeBindAddress != ":9091" || !c.o.LeaderElection {
					t.Errorf("%+v", c.o)
				}
			}},
		{Name: "local aids", Args: with("--issuer-kind", "ClusterIssuer", "--skr-webhook-extra-dns-names", " localhost, ,127.0.0.1.nip.io", "--skr-webhook-ready-url", "https://localhost:18443", "--ca-secret", "other/ca", "--skr-webhook-ingress-from", "gardener"),
			Check: func(t *testing.T, c *config) {
				if c.o.Issuer.Kind != "ClusterIssuer" || strings.Join(c.o.ExtraDNSNames, "|") != "localhost|127.0.0.1.nip.io" || c.o.Adoption.Ready == nil {
					t.Errorf("%+v", c.o)
				}
				if c.o.Trust.CASecret != (types.NamespacedName{Namespace: "other", Name: "ca"}) || len(c.o.Bundle.WebhookIngressFrom) == 0 {
					t.Errorf("%+v %v", c.o.Trust, c.o.Bundle.WebhookIngressFrom)
				}
			}},
		{Name: "rotation off", Args: with("--ca-secret", "", "--gateway-client-ca-secret", ""), Check: func(t *testing.T, c *config) {
			if c.o.Trust.CASecret.Name != "" || c.o.Trust.GatewayClientCASecret.Name != "" {
				t.Errorf("%+v", c.o.Trust)
			}
		}},
		{Name: "version skips validation", Args: []string{"--version", "--issuer-kind", "Nope"}, Check: func(t *testing.T, c *config) {
			if !c.Version {
				t.Error("Version not set")
			}
		}},
		{Name: "no issuer", Args: []string{"--kcp-gateway-host", "kcp"}, WantErr: []string{"--issuer-name: Required value"}},
		{Name: "no gateway host", Args: []string{"--issuer-name", "ca"}, WantErr: []string{"--kcp-gateway-host: Required value"}},
		{Name: "every problem at once", Args: []string{"--issuer-kind", "Certificate", "--runtime-workers", "-1", "--ca-secret", "ns/", "--skr-webhook-min-tls-version", "1.1"}, WantErr: []string{
			"--issuer-name: Required value", "--kcp-gateway-host: Required value", `--skr-webhook-min-tls-version: Unsupported value: "1.1"`, "--ca-secret: Invalid value",
			`--issuer-kind: Unsupported value: "Certificate"`, "--runtime-workers: Invalid value: -1: must be from 1 to 1024"}},
		{Name: "every flag checked", Args: with("--skr-webhook-ingress-from", "everyone", "--migration-extra-ca-secret", "x/y", "--gateway-client-ca-secret", "", "--kube-api-qps", "0",
			"--ca-renewals-per-second", "0", "--kyma-namespace", "K", "--gateway-namespace", "G", "--skr-namespace", "S", "--watcher-workers", "0", "--kube-api-burst", "0",
			"--skr-timeout", "0", "--skr-resync", "0", "--kubeconfig-retry", "0", "--watcher-debounce", "-1s", "--ca-poll-interval", "0", "--ca-settle", "-1s",
			"--certificate-duration", "-1s", "--certificate-renew-before", "-1s"), WantErr: []string{
			"--skr-webhook-ingress-from", "--migration-extra-ca-secret: Invalid value", "--kube-api-qps", "--ca-renewals-per-second", "--kyma-namespace", "--gateway-namespace",
			"--skr-namespace", "--watcher-workers", "--kube-api-burst", "--skr-timeout", "--skr-resync", "--kubeconfig-retry", "--watcher-debounce", "--ca-poll-interval",
			"--ca-settle", "--certificate-duration", "--certificate-renew-before"}},
		{Name: "issuer kind", Args: with("--issuer-kind", "Certificate"), WantErr: []string{`--issuer-kind: Unsupported value: "Certificate": supported values: "Issuer", "ClusterIssuer"`}},
		{Name: "ingress from", Args: with("--skr-webhook-ingress-from", "everyone"), WantErr: []string{"--skr-webhook-ingress-from"}},
		{Name: "gateway port", Args: with("--kcp-gateway-host", "kcp:http"), WantErr: []string{"--kcp-gateway-host"}},
		{Name: "webhook TLS version", Args: with("--skr-webhook-min-tls-version", "1.1"), WantErr: []string{"--skr-webhook-min-tls-version"}},
		{Name: "object key", Args: with("--gateway-ca-secret", "a/b/c"), WantErr: []string{"--gateway-ca-secret"}},
		{Name: "object key without name", Args: with("--ca-secret", "ns/"), WantErr: []string{"--ca-secret"}},
		{Name: "migration window without rotation", Args: with("--migration-extra-ca-secret", "istio-system/klm-watcher", "--ca-secret", ""), WantErr: []string{"--migration-extra-ca-secret: Invalid value: \"istio-system/klm-watcher\": needs --ca-secret"}},
		{Name: "shards", Args: with("--leader-elect", "--shard-identity", "vs-controller-0", "--shard-lease-duration", "5s"), Check: func(t *testing.T, c *config) {
			if c.o.ShardIdentity != "vs-controller-0" || c.o.ShardLeaseDuration != 5*time.Second {
				t.Errorf("%q %s", c.o.ShardIdentity, c.o.ShardLeaseDuration)
			}
		}},
		{Name: "shards without leader election", Args: with("--shard-identity", "vs-controller-0"), WantErr: []string{"--shard-identity: Invalid value: \"vs-controller-0\": needs --leader-elect"}},
		{Name: "shard lease too short", Args: with("--leader-elect", "--shard-identity", "a", "--shard-lease-duration", "1s"), WantErr: []string{"--shard-lease-duration"}},
		{Name: "bad duration", Args: with("--skr-resync", "often"), WantErr: []string{"invalid value"}},
		{Name: "unknown flag", Args: with("--metrics-addr", ":1"), WantErr: []string{"flag provided but not defined"}},
		{Name: "argument", Args: with("run"), WantErr: []string{"unexpected arguments"}},
	})
}

func TestParseConfigHelp(t *testing.T) {
	startuptest.Help(t, parseConfig, "vs-controller", "kubeconfig", "issuer-name", "metrics-bind-address", "health-probe-bind-address", "leader-elect", "version", "zap-log-level")
}
