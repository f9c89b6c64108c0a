package localenv

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
)

var update = flag.Bool("update", false, "rewrite testdata/istiod-gateway-xds.json from what Envoy received from istiod")

// TestIstiodGateway is the real gateway against the real istiod, from
// manifests/ (mesh config, Gateway, AuthorizationPolicy) and the sample
// Watcher's VirtualService (written by vs-controller's routing reconciler):
//   - the bootstrap pilot-agent renders from Istio's template passes
//     `envoy --mode validate`;
//   - nothing but the gateway's listener binds every interface;
//   - what Envoy took from istiod (its config_dump but the bootstrap)
//     names no extension the Envoy binary lacks (server_info's list): istiod's two istio-proxy-only extensions stay
//     off (istiod.go), and a new one would show up here first;
//   - the listeners, routes, clusters, endpoints and secrets Envoy took
//     from istiod, normalised (fixed local ports, no versions or times,
//     resources sorted by name, JSON with sorted keys), are the golden
//     file: a change to manifests/ or to the Istio version shows up as a
//     diff; `go test ./test/localenv -run TestIstiodGateway -update`
//     accepts it.
func TestIstiodGateway(t *testing.T) {
	testenv.SkipIfShort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := testenv.IstiodBinary(); err != nil {
		t.Fatal(err)
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	runCtx, runCancel := context.WithCancel(context.Background())
	s := &System{Env: env, KCP: env.Cluster("kcp"), Dir: t.TempDir(), runCtx: runCtx, cancel: runCancel, opts: Options{Log: testr.New(t)}}
	defer func() { _ = s.Stop() }()
	defer func() { // KEEP_LOGS=<dir>: after a failure, the logs and Envoy's config_dump go there
		if t.Failed() && os.Getenv("KEEP_LOGS") != "" {
			_ = exec.Command("cp", "-r", filepath.Join(s.Dir, "logs"), os.Getenv("KEEP_LOGS")).Run()
			d, _ := s.GatewayAdmin().ConfigDump(context.Background(), false)
			_ = os.WriteFile(filepath.Join(os.Getenv("KEEP_LOGS"), "config_dump.json"), d, 0o644)
			l, _ := s.GatewayAdmin().ListenerPorts(context.Background())
			t.Logf("listeners %v", l)
		}
	}()
	c := s.KCP.Client
	for _, ns := range []string{KymaNamespace, GatewayNamespace} {
		must(t, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	}
	ports, err := s.ports.reserve(8)
	must(t, err)
	s.gatewayPort = ports[7]
	// Fixed addresses of the services: Envoy never connects to them here.
	must(t, applyIstioConfig(ctx, c, []LocalService{
		{Name: ExtAuthzService, Namespace: KymaNamespace, Port: ExtAuthzPort, Protocol: "GRPC", Addr: "127.0.0.1:19001"},
		{Name: OperatorService, Namespace: KymaNamespace, Port: OperatorPort, Protocol: "HTTP", Addr: "127.0.0.1:18082"},
		{Name: VSControllerHealthService, Namespace: KymaNamespace, Port: VSControllerHealthPort, Protocol: "HTTP", Addr: "127.0.0.1:18090"},
		{Name: GatewayService, Namespace: GatewayNamespace, Port: 443, Protocol: "HTTPS", Addr: GatewayProxyIP + ":" + strconv.Itoa(s.gatewayPort), Labels: GatewayLabels},
	}))
	// The Gateway's credentialName and its client CA, as cert-manager and
	// vs-controller write them.
	ca, err := pki.NewCA("gateway-ca")
	must(t, err)
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: "kcp-gateway", DNSNames: []string{GatewayHost}})
	must(t, err)
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: GatewayTLSSecret}, Type: corev1.SecretTypeTLS,
		Data: map[string][]byte{corev1.TLSCertKey: leaf.CertPEM, corev1.TLSPrivateKeyKey: leaf.KeyPEM}}))
	must(t, c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: GatewayTLSSecret + "-cacert"},
		Data: map[string][]byte{"ca.crt": ca.PEM}}))
	w := SampleWatcher()
	must(t, c.Create(ctx, w))
	r := &routing.Reconciler{Client: c, Recorder: events.NewFakeRecorder(100), GatewayNamespace: GatewayNamespace}
	for range 5 { // finalizer, then the VirtualService
		_, err := r.Reconcile(ctx, ctrl.Request{NamespacedName: client.ObjectKeyFromObject(w)})
		must(t, err)
	}

	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	s.Istiod, err = s.startIstiod(ctx, addr(0), addr(1), addr(2))
	must(t, err)
	mesh, err := MeshConfig()
	must(t, err)
	must(t, s.prepareGateway(ctx, mesh, ports[3], ports[4], ports[5], ports[6]))
	s.gatewayCredentials = true
	must(t, s.SetGatewayUp(ctx, true))
	admin := s.GatewayAdmin()
	path := contract.EventPath(Manager)
	var dump []byte
	if err := poll(ctx, 50*time.Millisecond, func(c context.Context) (bool, error) {
		dump, err = admin.ConfigDump(c, true)
		return err == nil && bytes.Contains(dump, []byte(`"`+path+`"`)), err
	}); err != nil {
		t.Fatalf("the sample Watcher's route %s never arrived at Envoy: %v", path, err)
	}

	// Issue 40: no debug, stats or status port on every interface — of
	// the API server, istiod, pilot-agent or Envoy —, only the gateway's
	// own listener (istiod's, where clients connect).
	listeners, err := WildcardListeners(os.Getpid())
	must(t, err)
	for _, l := range listeners {
		if !strings.HasSuffix(l.Addr, ":"+strconv.Itoa(s.gatewayPort)) {
			t.Errorf("%v listens on every interface", l)
		}
	}

	// The bootstrap pilot-agent rendered from Istio's template.
	binary, err := testenv.EnvoyBinary()
	must(t, err)
	must(t, envoy.Validate(ctx, binary, filepath.Join(s.gateway.dir, "etc", "istio", "proxy", "envoy-rev.json")))

	si, err := admin.ServerInfo(ctx)
	must(t, err)
	xds, err := envoy.WithoutBootstrap(dump)
	must(t, err)
	unknown, err := envoy.UnknownExtensions(xds, si.Node.Extensions)
	must(t, err)
	for typ, where := range unknown {
		t.Errorf("the gateway's config names %s (at %s), which Envoy %s does not have", typ, where, si.Version)
	}

	got, err := normaliseConfigDump(dump, map[int]int{s.gatewayPort: 18443})
	must(t, err)
	golden := filepath.Join("testdata", "istiod-gateway-xds.json")
	if *update {
		must(t, os.MkdirAll("testdata", 0o755))
		must(t, os.WriteFile(golden, got, 0o644))
	}
	want, err := os.ReadFile(golden)
	must(t, err)
	if !bytes.Equal(got, want) {
		tmp := filepath.Join(os.TempDir(), "istiod-gateway-xds.got.json")
		_ = os.WriteFile(tmp, got, 0o644)
		t.Fatalf("the gateway's xDS from istiod differs from %s (what Envoy has now: %s; diff them, and run with -update when the change is intended)", golden, tmp)
	}
}

// apiServerCluster is the KCP API server's own Service (kubernetes.default),
// whose endpoint is a random port: left out of the golden file.
const apiServerCluster = "outbound|443||kubernetes.default.svc.cluster.local"

// normaliseConfigDump keeps of Envoy's config_dump what came over xDS —
// listeners (LDS), routes (RDS), clusters (CDS), endpoints (EDS) and the
// names of the secrets (SDS) — without versions, times and the API
// server's cluster, each list sorted by name, the ports in ports replaced,
// as JSON with sorted keys.
func normaliseConfigDump(dump []byte, ports map[int]int) ([]byte, error) {
	for from, to := range ports {
		dump = bytes.ReplaceAll(dump, []byte(`"port_value": `+strconv.Itoa(from)), []byte(`"port_value": `+strconv.Itoa(to)))
		for _, end := range []string{`"`, `;`} { // names and stat prefixes
			dump = bytes.ReplaceAll(dump, []byte(`_`+strconv.Itoa(from)+end), []byte(`_`+strconv.Itoa(to)+end))
		}
	}
	var d struct {
		Configs []map[string]any `json:"configs"`
	}
	if err := json.Unmarshal(dump, &d); err != nil {
		return nil, err
	}
	out := map[string][]any{}
	add := func(typ string, v any) {
		m, ok := v.(map[string]any)
		if !ok {
			return
		}
		if m["name"] == apiServerCluster || m["cluster_name"] == apiServerCluster {
			return
		}
		out[typ] = append(out[typ], m)
	}
	list := func(m map[string]any, key string) []any { l, _ := m[key].([]any); return l }
	for _, c := range d.Configs {
		switch t, _ := c["@type"].(string); {
		case strings.HasSuffix(t, ".ListenersConfigDump"):
			for _, l := range list(c, "dynamic_listeners") {
				if st, ok := l.(map[string]any)["active_state"].(map[string]any); ok {
					add("LDS", st["listener"])
				}
			}
		case strings.HasSuffix(t, ".RoutesConfigDump"):
			for _, r := range list(c, "dynamic_route_configs") {
				rc, _ := r.(map[string]any)["route_config"].(map[string]any)
				for _, vh := range list(rc, "virtual_hosts") {
					if vh, ok := vh.(map[string]any); ok {
						sort.SliceStable(list(vh, "routes"), func(i, j int) bool {
							routes := list(vh, "routes")
							return sourceOf(routes[i]) < sourceOf(routes[j])
						})
					}
				}
				add("RDS", rc)
			}
		case strings.HasSuffix(t, ".ClustersConfigDump"):
			for _, cl := range list(c, "dynamic_active_clusters") {
				add("CDS", cl.(map[string]any)["cluster"])
			}
		case strings.HasSuffix(t, ".EndpointsConfigDump"):
			for _, e := range list(c, "dynamic_endpoint_configs") {
				add("EDS", e.(map[string]any)["endpoint_config"])
			}
		case strings.HasSuffix(t, ".SecretsConfigDump"):
			for _, sec := range list(c, "dynamic_active_secrets") {
				add("SDS", map[string]any{"name": sec.(map[string]any)["name"]})
			}
		}
	}
	for _, l := range out {
		sort.Slice(l, func(i, j int) bool { return nameOf(l[i]) < nameOf(l[j]) })
	}
	b, err := json.MarshalIndent(out, "", " ")
	return append(b, '\n'), err
}

// sourceOf is the VirtualService a route of istiod's came from (its
// metadata istio.config). istiod orders the routes of different
// VirtualServices on one host by their creation times, to the second, and
// by name on a tie: whether the health route and a Watcher's are created
// in the same second is timing (the golden file once failed on it), while
// the order within one VirtualService is ours and kept (a stable sort).
func sourceOf(route any) string {
	m, _ := route.(map[string]any)
	md, _ := m["metadata"].(map[string]any)
	fm, _ := md["filter_metadata"].(map[string]any)
	istio, _ := fm["istio"].(map[string]any)
	s, _ := istio["config"].(string)
	return s
}

func nameOf(v any) string {
	m, _ := v.(map[string]any)
	if n, ok := m["name"].(string); ok {
		return n
	}
	n, _ := m["cluster_name"].(string)
	return n
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// The golden comparison ignores the order istiod gives the routes of
// different VirtualServices (creation times), never the order of one
// VirtualService's routes.
func TestNormaliseConfigDumpRouteOrder(t *testing.T) {
	route := func(name, vs string) string {
		return `{"name": "` + name + `", "metadata": {"filter_metadata": {"istio": {"config": "/apis/networking.istio.io/v1/namespaces/ns/virtual-service/` + vs + `"}}}}`
	}
	dump := func(routes ...string) []byte {
		return []byte(`{"configs": [{"@type": "type.googleapis.com/envoy.admin.v3.RoutesConfigDump", "dynamic_route_configs": [` +
			`{"route_config": {"name": "https.443", "virtual_hosts": [{"name": "gw", "routes": [` + strings.Join(routes, ",") + `]}]}}]}]}`)
	}
	norm := func(d []byte) string {
		t.Helper()
		b, err := normaliseConfigDump(d, nil)
		must(t, err)
		return string(b)
	}
	a1, a2, b1 := route("a1", "a"), route("a2", "a"), route("b1", "b")
	if x, y := norm(dump(a1, b1, a2)), norm(dump(b1, a1, a2)); x != y {
		t.Errorf("the order of two VirtualServices' routes counts:\n%s\n%s", x, y)
	}
	if x, y := norm(dump(a1, a2, b1)), norm(dump(a2, a1, b1)); x == y {
		t.Errorf("the order of one VirtualService's routes is lost:\n%s", x)
	}
}
