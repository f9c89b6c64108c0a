package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
)

func TestParseOptions(t *testing.T) {
	for _, tt := range []struct {
		name    string
		args    []string
		wantErr string
		check   func(t *testing.T, o *options)
	}{
		{name: "defaults", args: nil, check: func(t *testing.T, o *options) {
			if o.listenAddr != ":8082" || o.manager != "example-operator" || o.kymaNamespace != "kcp-system" || o.identity != "header" || o.print != "text" {
				t.Errorf("%+v", o)
			}
			if !o.Zap.Development {
				t.Error("zap: not the development (console) encoder by default")
			}
		}},
		{name: "deprecated aliases", args: []string{"--metrics-addr", ":9090", "--health-addr", ":9091"}, check: func(t *testing.T, o *options) {
			if o.metricsAddr != ":9090" || o.healthAddr != ":9091" {
				t.Errorf("metrics %q health %q", o.metricsAddr, o.healthAddr)
			}
		}},
		{name: "san pinning with TLS, json", args: []string{"--identity", "san-pinning", "--tls-cert-file", "c", "--tls-key-file", "k", "--print", "json", "--leader-elect"},
			check: func(t *testing.T, o *options) {
				if o.identity != "san-pinning" || o.tlsCertFile != "c" || o.print != "json" || !o.leaderElect {
					t.Errorf("%+v", o)
				}
			}},
		{name: "version skips validation", args: []string{"--version", "--print", "xml"}, check: func(t *testing.T, o *options) {
			if !o.Version {
				t.Error("Version not set")
			}
		}},
		{name: "identity", args: []string{"--identity", "cn"}, wantErr: `--identity must be header or san-pinning, not "cn"`},
		{name: "certificate without key", args: []string{"--tls-cert-file", "c"}, wantErr: "--tls-cert-file and --tls-key-file go together"},
		{name: "key without certificate", args: []string{"--tls-key-file", "k"}, wantErr: "--tls-cert-file and --tls-key-file go together"},
		{name: "print", args: []string{"--print", "xml"}, wantErr: `--print="xml": want text or json`},
		{name: "unknown flag", args: []string{"--nope"}, wantErr: "flag provided but not defined"},
		{name: "argument", args: []string{"serve"}, wantErr: "unexpected arguments"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseOptions(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("error %v, want one containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.check(t, o)
		})
	}
}

func TestParseOptionsHelp(t *testing.T) {
	for _, arg := range []string{"-h", "--help"} {
		var out bytes.Buffer
		if _, err := parseOptions([]string{arg}, &out); !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s: %v, want flag.ErrHelp", arg, err)
		}
		if !strings.HasPrefix(out.String(), "Usage: example [flags]") || !strings.Contains(out.String(), "-kubeconfig") {
			t.Errorf("%s: usage\n%s", arg, out.String())
		}
	}
}
