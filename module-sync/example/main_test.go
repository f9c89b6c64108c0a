package main

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
)

func TestParseOptions(t *testing.T) {
	startuptest.Run(t, parseOptions, []startuptest.Case[*options]{
		{Name: "defaults", Args: nil, Check: func(t *testing.T, o *options) {
			if o.metricsAddr != ":8080" || o.healthAddr != ":8081" || o.namespace != "kcp-system" || o.module != "sample" || o.leNamespace != "kcp-system" || o.leaderElect {
				t.Errorf("%+v", o)
			}
		}},
		{Name: "lease in its own namespace", Args: []string{"--kyma-namespace", "kcp", "--leader-election-namespace", "leases", "--leader-elect", "--module", "serverless"},
			Check: func(t *testing.T, o *options) {
				if o.namespace != "kcp" || o.leNamespace != "leases" || !o.leaderElect || o.module != "serverless" {
					t.Errorf("%+v", o)
				}
			}},
		{Name: "version skips validation", Args: []string{"--version", "--module", "Not A Label"}, Check: func(t *testing.T, o *options) {
			if !o.Version {
				t.Error("Version not set")
			}
		}},
		{Name: "module", Args: []string{"--module", "Sample_Module"}, WantErr: []string{`--module: Invalid value: "Sample_Module"`}},
		{Name: "empty module", Args: []string{"--module", ""}, WantErr: []string{"--module"}},
		{Name: "every problem at once", Args: []string{"--module", "", "--kyma-namespace", "KCP"}, WantErr: []string{`--module: Invalid value: ""`, `--kyma-namespace: Invalid value: "KCP"`}},
		{Name: "unknown flag", Args: []string{"--nope"}, WantErr: []string{"flag provided but not defined"}},
		{Name: "argument", Args: []string{"serve"}, WantErr: []string{"unexpected arguments"}},
	})
}

func TestParseOptionsHelp(t *testing.T) {
	startuptest.Help(t, parseOptions, "example", "kubeconfig", "module", "metrics-bind-address", "health-probe-bind-address", "leader-elect", "version", "zap-log-level")
}
