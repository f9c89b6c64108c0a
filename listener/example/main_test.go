package main

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/startup/startuptest"
)

func TestParseOptions(t *testing.T) {
	startuptest.Run(t, parseOptions, []startuptest.Case[*options]{
		{Name: "defaults", Args: nil, Check: func(t *testing.T, o *options) {
			if o.listenAddr != ":8082" || o.manager != "example-operator" || o.kymaNamespace != "kcp-system" || o.identity != "header" || o.print != "text" {
				t.Errorf("%+v", o)
			}
			if !o.Zap.Development {
				t.Error("zap: not the development (console) encoder by default")
			}
		}},
		{Name: "deprecated aliases", Args: []string{"--metrics-addr", ":9090", "--health-addr", ":9091"}, Check: func(t *testing.T, o *options) {
			if o.metricsAddr != ":9090" || o.healthAddr != ":9091" {
				t.Errorf("metrics %q health %q", o.metricsAddr, o.healthAddr)
			}
		}},
		{Name: "san pinning with TLS, json", Args: []string{"--identity", "san-pinning", "--tls-cert-file", "c", "--tls-key-file", "k", "--print", "json", "--leader-elect"},
			Check: func(t *testing.T, o *options) {
				if o.identity != "san-pinning" || o.tlsCertFile != "c" || o.print != "json" || !o.leaderElect {
					t.Errorf("%+v", o)
				}
			}},
		{Name: "version skips validation", Args: []string{"--version", "--print", "xml"}, Check: func(t *testing.T, o *options) {
			if !o.Version {
				t.Error("Version not set")
			}
		}},
		{Name: "identity", Args: []string{"--identity", "cn"}, WantErr: []string{`--identity: Unsupported value: "cn": supported values: "header", "san-pinning"`}},
		{Name: "certificate without key", Args: []string{"--tls-cert-file", "c"}, WantErr: []string{"--tls-cert-file: Required value: --tls-cert-file and --tls-key-file go together"}},
		{Name: "key without certificate", Args: []string{"--tls-key-file", "k"}, WantErr: []string{"--tls-cert-file and --tls-key-file go together"}},
		{Name: "print", Args: []string{"--print", "xml"}, WantErr: []string{`--print: Unsupported value: "xml"`}},
		{Name: "unusable CA file", Args: []string{"--identity", "san-pinning", "--ca-file", "/dev/null"}, WantErr: []string{`--ca-file: Invalid value: "/dev/null": no PEM certificate in it`}},
		{Name: "CA file without SAN pinning", Args: []string{"--ca-file", "ca.crt"}, WantErr: []string{`--ca-file: Invalid value: "ca.crt": needs --identity=san-pinning`}},
		{Name: "every problem at once", Args: []string{"--manager", "Ops", "--kyma-namespace", "a.b", "--identity", "cn", "--tls-key-file", "k", "--print", "xml"},
			WantErr: []string{`--manager: Invalid value: "Ops"`, `--kyma-namespace: Invalid value: "a.b"`, "--identity", "--tls-cert-file", "--print"}},
		{Name: "unknown flag", Args: []string{"--nope"}, WantErr: []string{"flag provided but not defined"}},
		{Name: "argument", Args: []string{"serve"}, WantErr: []string{"unexpected arguments"}},
	})
}

func TestParseOptionsHelp(t *testing.T) {
	startuptest.Help(t, parseOptions, "example", "kubeconfig", "listen-addr", "metrics-bind-address", "metrics-addr", "health-probe-bind-address", "health-addr", "leader-elect", "version", "zap-log-level")
}
