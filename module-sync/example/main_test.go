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
			if o.metricsAddr != ":8080" || o.healthAddr != ":8081" || o.namespace != "kcp-system" || o.module != "sample" || o.leNamespace != "kcp-system" || o.leaderElect {
				t.Errorf("%+v", o)
			}
		}},
		{name: "lease in its own namespace", args: []string{"--kyma-namespace", "kcp", "--leader-election-namespace", "leases", "--leader-elect", "--module", "serverless"},
			check: func(t *testing.T, o *options) {
				if o.namespace != "kcp" || o.leNamespace != "leases" || !o.leaderElect || o.module != "serverless" {
					t.Errorf("%+v", o)
				}
			}},
		{name: "version skips validation", args: []string{"--version", "--module", "Not A Label"}, check: func(t *testing.T, o *options) {
			if !o.Version {
				t.Error("Version not set")
			}
		}},
		{name: "module", args: []string{"--module", "Sample_Module"}, wantErr: `--module "Sample_Module"`},
		{name: "empty module", args: []string{"--module", ""}, wantErr: "--module"},
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
