package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseConfig(t *testing.T) {
	base := []string{"--module-resources", "sample.kyma-project.io/v1alpha1/samples"}
	with := func(extra ...string) []string { return append(append([]string{}, base...), extra...) }
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, c *config)
	}{
		{name: "defaults", args: base, check: func(t *testing.T, c *config) {
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
		{name: "kubebuilder flag names", args: with("--metrics-bind-address", "0", "--health-probe-bind-address", ":9091", "--leader-elect", "--kubeconfig", "/dev/null"),
			check: func(t *testing.T, c *config) {
				if c.o.MetricsBindAddress != "0" || c.o.HealthProbeBindAddress != ":9091" || !c.o.LeaderElection {
					t.Errorf("%+v", c.o)
				}
			}},
		{name: "service in the Kyma namespace", args: with("--kyma-namespace", "kcp", "--service-name", "ms", "--service-port", "9000", "--gateway-selector", "a=b, c=,"),
			check: func(t *testing.T, c *config) {
				if c.o.Service.Name != "ms" || c.o.Service.Namespace != "kcp" || c.o.Service.Port != 9000 {
					t.Errorf("service %+v", c.o.Service)
				}
				if len(c.o.GatewaySelector) != 2 || c.o.GatewaySelector["a"] != "b" || c.o.GatewaySelector["c"] != "" {
					t.Errorf("gateway selector %v", c.o.GatewaySelector)
				}
			}},
		{name: "version skips validation", args: []string{"--version"}, check: func(t *testing.T, c *config) {
			if !c.Version {
				t.Error("Version not set")
			}
		}},
		{name: "no module resources", args: nil, wantErr: "--module-resources: no module resources"},
		{name: "bad module resource", args: []string{"--module-resources", "samples"}, wantErr: "--module-resources"},
		{name: "selector without =", args: with("--gateway-selector", "gateway"), wantErr: `--gateway-selector: "gateway" is not key=value`},
		{name: "selector without key", args: with("--gateway-selector", "=x"), wantErr: "--gateway-selector"},
		{name: "bad duration", args: with("--mirror-interval", "hourly"), wantErr: "invalid value"},
		{name: "unknown flag", args: with("--nope"), wantErr: "flag provided but not defined"},
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
		if !strings.HasPrefix(out.String(), "Usage: module-sync [flags]") || !strings.Contains(out.String(), "-kubeconfig") {
			t.Errorf("%s: usage\n%s", arg, out.String())
		}
	}
}
