package main

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
)

func TestParseConfig(t *testing.T) {
	base := []string{"--module-resources", "sample=sample.kyma-project.io/v1alpha1/samples"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	startuptest.Run(t, parseConfig, []startuptest.Case[*config]{
		{Name: "defaults", Args: base, Check: func(t *testing.T, c *config) {
			o := c.o
			if o.MetricsBindAddress != ":8080" || o.HealthProbeBindAddress != ":8081" || o.LeaderElection || o.KymaNamespace != "kcp-system" {
				t.Errorf("manager defaults: %+v", o)
			}
			if len(o.ModuleResources) != 1 || o.ModuleResources[0].Resource != "samples" {
				t.Errorf("module resources %+v", o.ModuleResources)
			}
			if len(o.GatewaySelector) != 1 || o.GatewaySelector["operator.kyma-project.io/watcher-gateway"] != "default" {
				t.Errorf("gateway selector %v", o.GatewaySelector)
			}
			if o.Service.Name != "module-sync" || o.Service.Namespace != "kcp-system" || o.Service.Port != 8082 {
				t.Errorf("service %+v", o.Service)
			}
			if c.qps != 50 || c.burst != 100 || o.Manager != "module-sync" {
				t.Errorf("qps %v burst %d manager %q", c.qps, c.burst, o.Manager)
			}
		}},
		{Name: "kubebuilder flag names", Args: with("--metrics-bind-address", "0", "--health-probe-bind-address", ":9091", "--leader-elect", "--kubeconfig", "/dev/null"),
			Check: func(t *testing.T, c *config) {
				if c.o.MetricsBindAddress != "0" || c.o.HealthProbeBindAddress != ":9091" || !c.o.LeaderElection {
					t.Errorf("%+v", c.o)
				}
			}},
		{Name: "service in the Kyma namespace", Args: with("--kyma-namespace", "kcp", "--service-name", "ms", "--service-port", "9000", "--gateway-selector", "a=b, c=,"),
			Check: func(t *testing.T, c *config) {
				if c.o.Service.Name != "ms" || c.o.Service.Namespace != "kcp" || c.o.Service.Port != 9000 {
					t.Errorf("service %+v", c.o.Service)
				}
				if len(c.o.GatewaySelector) != 2 || c.o.GatewaySelector["a"] != "b" || c.o.GatewaySelector["c"] != "" {
					t.Errorf("gateway selector %v", c.o.GatewaySelector)
				}
			}},
		{Name: "version skips validation", Args: []string{"--version"}, Check: func(t *testing.T, c *config) {
			if !c.Version {
				t.Error("Version not set")
			}
		}},
		{Name: "no module resources", Args: nil, WantErr: []string{"--module-resources: Required value"}},
		{Name: "bad module resource", Args: []string{"--module-resources", "samples"}, WantErr: []string{"--module-resources"}},
		{Name: "selector without =", Args: with("--gateway-selector", "gateway"), WantErr: []string{`--gateway-selector: Invalid value: "gateway": not key=value`}},
		{Name: "unusable CA file", Args: with("--identity", "san-pinning", "--ca-file", "/dev/null"), WantErr: []string{`--ca-file: Invalid value: "/dev/null": no PEM certificate in it`}},
		{Name: "CA file without SAN pinning", Args: with("--ca-file", "ca.crt"), WantErr: []string{`--ca-file: Invalid value: "ca.crt": needs --identity=san-pinning`}},
		{Name: "every problem at once", Args: with("--identity=bogus", "--workers=-5"), WantErr: []string{
			`--identity: Unsupported value: "bogus": supported values: "header", "san-pinning"`,
			"--workers: Invalid value: -5: must be from 1 to 1024"}},
		{Name: "every flag checked", Args: []string{"--module-resources", "x", "--gateway-selector", "a", "--service-port", "0", "--retry-base", "2s", "--retry-max", "1s",
			"--kube-api-qps", "0", "--kyma-namespace", "KCP", "--manager", "a_b", "--service-name", "-", "--tls-cert-file", "c", "--kube-api-burst", "0",
			"--mirror-interval", "0", "--drift-interval", "-1s", "--skr-timeout", "0", "--confirm-delay", "-1s", "--pass-timeout", "-1s"}, WantErr: []string{
			"--module-resources: Invalid value", "--gateway-selector", "--service-port", "--retry-max", "--kube-api-qps",
			"--kyma-namespace", "--manager", "--service-name", "--tls-cert-file: Required value: --tls-cert-file and --tls-key-file go together",
			"--kube-api-burst", "--mirror-interval", "--drift-interval", "--skr-timeout", "--confirm-delay", "--pass-timeout"}},
		{Name: "selector without key", Args: with("--gateway-selector", "=x"), WantErr: []string{"--gateway-selector"}},
		{Name: "bad duration", Args: with("--mirror-interval", "hourly"), WantErr: []string{"invalid value"}},
		{Name: "unknown flag", Args: with("--nope"), WantErr: []string{"flag provided but not defined"}},
		{Name: "argument", Args: with("run"), WantErr: []string{"unexpected arguments"}},
	})
}

func TestParseConfigHelp(t *testing.T) {
	startuptest.Help(t, parseConfig, "module-sync", "kubeconfig", "module-resources", "metrics-bind-address", "health-probe-bind-address", "leader-elect", "version", "zap-log-level")
}
