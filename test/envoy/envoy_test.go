package envoy_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func TestUsedExtensions(t *testing.T) {
	used, err := envoy.UsedExtensions([]byte(`{"configs":[{"@type":"type.googleapis.com/envoy.admin.v3.ListenersConfigDump",
	  "listeners":[{"filter_chains":[{"filters":[{"name":"x","typed_config":{"@type":"type.googleapis.com/A",
	    "http_filters":[{"name":"istio.alpn","typed_config":{"@type":"type.googleapis.com/udpa.type.v1.TypedStruct","type_url":"type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig"}}],
	    "route_config":{"virtual_hosts":[{"typed_per_filter_config":{"f":{"@type":"type.googleapis.com/B"}}}]}}}]}]}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"type.googleapis.com/A", "type.googleapis.com/B", "type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig"} {
		if _, ok := used[want]; !ok {
			t.Errorf("%s not found in %v", want, used)
		}
	}
	if len(used) != 3 {
		t.Errorf("used %v: want exactly 3 (the dump's own types are not extensions)", used)
	}
}

// The static edge's bootstrap passes `envoy --mode validate`, and the
// running Envoy has every extension it names (server_info's list), while
// Istio's ALPN filter is not among them: upstream Envoy, not istio-proxy.
func TestStaticEdgeBootstrap(t *testing.T) {
	testenv.SkipIfShort(t)
	ca, err := pki.NewCA("edge-ca")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "gw", DNSNames: []string{"localhost"}})
	if err != nil {
		t.Fatal(err)
	}
	e := envoy.NewEdge("127.0.0.1:1", "127.0.0.1:2", leaf, ca)
	p, _ := envoy.StartEdge(t, e) // validates first
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	si, err := p.Admin.ServerInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(si.Version, "/"+testenv.EnvoyVersion+"/") && os.Getenv(testenv.EnvoyBinaryEnv) == "" {
		t.Errorf("server_info version %q, want Envoy %s", si.Version, testenv.EnvoyVersion)
	}
	dump, err := p.Admin.ConfigDump(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	unknown, err := envoy.UnknownExtensions(dump, si.Node.Extensions)
	if err != nil {
		t.Fatal(err)
	}
	if len(unknown) != 0 {
		t.Errorf("the edge names extensions Envoy does not have: %v", unknown)
	}
	alpn := []byte(`{"typed_config":{"@type":"type.googleapis.com/istio.envoy.config.filter.http.alpn.v2alpha1.FilterConfig"}}`)
	if unknown, _ := envoy.UnknownExtensions(alpn, si.Node.Extensions); len(unknown) != 1 && os.Getenv(testenv.EnvoyBinaryEnv) == "" {
		t.Errorf("upstream Envoy has Istio's ALPN filter? unknown: %v", unknown)
	}
	if err := envoy.Validate(ctx, mustBinary(t), filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("validate of a missing bootstrap passed")
	}
	// Pid is the Envoy process itself (make bench-compare reads its CPU
	// clock), not a wrapper around it.
	want, err := filepath.EvalSymlinks(mustBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", p.Pid())); err != nil || exe != want {
		t.Errorf("pid %d runs %q (%v), want %s", p.Pid(), exe, err, want)
	}
}

func mustBinary(t *testing.T) string {
	t.Helper()
	b, err := testenv.EnvoyBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
