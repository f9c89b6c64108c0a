package envoy_test

import (
	"testing"

	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
)

func TestRouteClusterAndVersions(t *testing.T) {
	dump := []byte(`{"configs":[
	 {"@type":"type.googleapis.com/envoy.admin.v3.ListenersConfigDump","version_info":"l1"},
	 {"@type":"type.googleapis.com/envoy.admin.v3.RoutesConfigDump","dynamic_route_configs":[{"version_info":"r7","route_config":{"name":"https.443",
	   "virtual_hosts":[{"domains":["*"],"routes":[
	     {"match":{"path":"/v2/a/event"},"route":{"cluster":"a"}},
	     {"match":{"path_separated_prefix":"/foreign"},"route":{"cluster":"f"}},
	     {"match":{"safe_regex":{"regex":"/r/[0-9]+"}},"route":{"cluster":"r"}},
	     {"match":{"prefix":"/v2/b/","case_sensitive":false},"route":{"cluster":"b"}},
	     {"match":{"prefix":"/d"},"direct_response":{"status":404}}]}]}}]}]}`)
	for path, want := range map[string]string{
		"/v2/a/event": "a", "/v2/a/event2": "", "/foreign": "f", "/foreign/x": "f", "/foreignx": "",
		"/r/12": "r", "/r/1x": "", "/V2/B/event": "b", "/d/x": "", "/other": "",
	} {
		got, err := envoy.RouteCluster(dump, "localhost", path)
		if err != nil || got != want {
			t.Errorf("RouteCluster(%s) = %q, %v; want %q", path, got, err, want)
		}
	}
	v, err := envoy.Versions(dump)
	if err != nil || v["LDS"] != "l1" || v["RDS"] != "https.443=r7@" {
		t.Errorf("Versions = %v, %v", v, err)
	}
}
