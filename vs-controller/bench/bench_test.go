// Package bench measures vs-controller at scale against real API servers:
// how long 1,000 Watchers and 500 runtimes take to reach steady state from a
// cold start, how many write requests that costs, and that a second full
// pass (a restarted controller) writes nothing.
//
// The KCP is a real API server (envtest) with cert-manager's own controllers
// and kube-controller-manager (test/cmcontrollers, testenv).
// The runtimes' (SKRs') API servers are one of two stand-ins, chosen with
// -vsbench.skr:
//
//   - apiserver (the default): all runtimes' kubeconfigs point at one real
//     SKR API server. So that the runtimes do not overwrite each other's
//     bundle there, the benchmark gives each runtime its own slice of that
//     cluster: a client wrapper (isolated below) maps the bundle's namespace
//     to skr-<runtime> and the webhook configuration's name to
//     skr-webhook-<runtime>. Everything else — the objects, their size, the
//     requests — is what a real runtime gets. That SKR API server is started
//     with a /16 service range (envtest's default /24 has room for only 253
//     skr-webhook Services). It is the bottleneck beyond a few thousand
//     runtimes (seven applies per runtime, all on one server).
//   - memory: one in-memory cluster per runtime (package test/memskr:
//     server-side apply, metadata and full reads, deletes; bodies shared
//     between runtimes), given to vs-controller through its
//     skrclient.ClusterClients option. No SKR API server is in the way, so
//     vs-controller and the KCP are what is measured; the stand-in holds
//     ~27 KiB per runtime (10,000 runtimes fit in the bench process) and its
//     "server side" runs in that process too (a quarter of its CPU at
//     10,000 runtimes, docs/performance.md).
package bench_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	goruntime "runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	istioapiv1 "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/client-go/transport"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/memskr"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

var (
	numWatchers = flag.Int("vsbench.watchers", 1000, "Watchers in the benchmark (100 with -short)")
	numRuntimes = flag.Int("vsbench.runtimes", 500, "runtimes (Kyma CRs) in the benchmark (50 with -short)")
	logFile     = flag.String("vsbench.log", "", "write the controller's log to this file")
	unlabelled  = flag.Bool("vsbench.unlabelled-kubeconfigs", false, "leave the kubeconfig Secrets without the cache label (read uncached at every pass, as Lifecycle Manager's are)")
	skrMode     = flag.String("vsbench.skr", skrAPIServer, "SKR stand-in: "+skrAPIServer+" (one shared real SKR API server, a namespace per runtime) or "+
		skrMemory+" (test/memskr: an in-memory cluster per runtime)")
	kcpQPS   = flag.Float64("vsbench.qps", 50, "vs-controller's KCP client QPS (the binary's --kube-api-qps)")
	kcpBurst = flag.Int("vsbench.burst", 100, "vs-controller's KCP client burst (the binary's --kube-api-burst)")
	maxWait  = flag.Duration("vsbench.max-wait", 30*time.Minute, "give up when steady state (or the second pass) takes longer")
)

// SKR stand-ins (-vsbench.skr).
const (
	skrAPIServer = "apiserver"
	skrMemory    = "memory"
)

const (
	kymaNS    = "kcp-system"
	gatewayNS = "istio-system"
	watcherNS = "operators"
)

// counter counts requests by verb and resource.
type counter struct {
	mu    sync.Mutex
	by    map[string]int
	total atomic.Int64
	write atomic.Int64
}

func newCounter() *counter { return &counter{by: map[string]int{}} }

func (c *counter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		if req.Method == http.MethodGet {
			c.record(false, "")
		} else {
			c.record(true, req.Method+" "+resourceOf(req.URL.Path))
		}
		return rt.RoundTrip(req)
	})
}

// record counts one request; writes also by what.
func (c *counter) record(write bool, what string) {
	c.total.Add(1)
	if write {
		c.write.Add(1)
		c.mu.Lock()
		c.by[what]++
		c.mu.Unlock()
	}
}

func (c *counter) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.by = map[string]int{}
	c.total.Store(0)
	c.write.Store(0)
}

func (c *counter) breakdown() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for k, v := range c.by {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	return strings.Join(parts, " ")
}

// resourceOf turns /apis/g/v/namespaces/ns/res/name/sub into res[/sub].
func resourceOf(path string) string {
	seg := strings.Split(strings.Trim(path, "/"), "/")
	if len(seg) > 0 && seg[0] == "api" {
		seg = seg[2:]
	} else if len(seg) > 2 {
		seg = seg[3:]
	}
	if len(seg) >= 2 && seg[0] == "namespaces" && len(seg) > 2 {
		seg = seg[2:]
	}
	switch len(seg) {
	case 0:
		return "?"
	case 3:
		return seg[0] + "/" + seg[2]
	default:
		return seg[0]
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// isolated gives every runtime its own namespace and webhook configuration
// name in the one SKR API server (see the package comment).
type isolated struct {
	inner *skrclient.KubeconfigClients
}

func (i *isolated) For(ctx context.Context, key string, kubeconfig []byte) (client.Client, error) {
	c, err := i.inner.For(ctx, key, kubeconfig)
	if err != nil {
		return nil, err
	}
	id := key[strings.Index(key, "/")+1:]
	return &renaming{Client: c, ns: "skr-" + id, vwc: bundle.Name + "-" + id}, nil
}

func (i *isolated) Forget(key string) { i.inner.Forget(key) }

type renaming struct {
	client.Client
	ns, vwc string
}

func (r *renaming) rename(kind string, key client.ObjectKey) client.ObjectKey {
	switch {
	case kind == "ValidatingWebhookConfiguration" && key.Name == bundle.Name:
		key.Name = r.vwc
	case kind == "Namespace" && key.Name == bundle.DefaultNamespace:
		key.Name = r.ns
	case key.Namespace == bundle.DefaultNamespace:
		key.Namespace = r.ns
	}
	return key
}

func (r *renaming) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	if err := r.Client.Get(ctx, r.rename(kind, key), obj, opts...); err != nil {
		return err
	}
	// Report the object under the name the controller asked for.
	obj.SetName(key.Name)
	obj.SetNamespace(key.Namespace)
	return nil
}

type applyObject interface {
	GetKind() string
	GetName() string
	GetNamespace() string
	SetName(string)
	SetNamespace(string)
}

func (r *renaming) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	u, ok := ac.(applyObject) // client.ApplyConfigurationFromUnstructured embeds *Unstructured
	if !ok {
		return fmt.Errorf("bench: cannot rename %T", ac)
	}
	key := r.rename(u.GetKind(), client.ObjectKey{Namespace: u.GetNamespace(), Name: u.GetName()})
	u.SetName(key.Name)
	u.SetNamespace(key.Namespace)
	return r.Client.Apply(ctx, ac, opts...)
}

// memClients gives every runtime its own in-memory cluster (-vsbench.skr=memory),
// its requests counted.
type memClients struct {
	fleet *memskr.Fleet
	count *counter
}

func (m *memClients) For(_ context.Context, key string, kubeconfig []byte) (client.Client, error) {
	if len(kubeconfig) == 0 {
		return nil, fmt.Errorf("bench: no kubeconfig for %s", key)
	}
	return &counted{Client: m.fleet.Cluster(key), count: m.count}, nil
}

func (m *memClients) Forget(string) {} // the cluster stays; there is no client to drop

// counted counts an in-memory cluster's requests as the transport wrapper
// counts a real API server's.
type counted struct {
	client.Client
	count *counter
}

func kindOf(c client.Client, obj runtime.Object) string {
	gvk, err := c.GroupVersionKindFor(obj)
	if err != nil {
		return "?"
	}
	return gvk.Kind
}

func (c *counted) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	c.count.record(false, "")
	return c.Client.Get(ctx, key, obj, opts...)
}

func (c *counted) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c.count.record(false, "")
	return c.Client.List(ctx, list, opts...)
}

func (c *counted) Apply(ctx context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	kind := "?"
	if u, ok := ac.(applyObject); ok {
		kind = u.GetKind()
	}
	c.count.record(true, "apply "+kind)
	return c.Client.Apply(ctx, ac, opts...)
}

func (c *counted) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	c.count.record(true, "create "+kindOf(c.Client, obj))
	return c.Client.Create(ctx, obj, opts...)
}

func (c *counted) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	c.count.record(true, "update "+kindOf(c.Client, obj))
	return c.Client.Update(ctx, obj, opts...)
}

func (c *counted) Delete(ctx context.Context, obj client.Object, opts ...client.DeleteOption) error {
	c.count.record(true, "delete "+kindOf(c.Client, obj))
	return c.Client.Delete(ctx, obj, opts...)
}

func (c *counted) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	c.count.record(true, "patch "+kindOf(c.Client, obj))
	return c.Client.Patch(ctx, obj, patch, opts...)
}

// crMetric reads one series of controller-runtime's own metrics (workqueue,
// workers, errors) for a controller. controller-runtime keeps those
// collectors unexported, so prometheus/testutil cannot reach them; they are
// read back from its registry.
func crMetric(name, controller string) float64 {
	mfs, err := ctrlmetrics.Registry.Gather()
	if err != nil {
		panic(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "controller" && l.GetValue() == controller {
					return m.GetGauge().GetValue() + m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// idle reports whether both controllers have nothing queued or running.
func idle() bool {
	for _, c := range []string{routing.ControllerName, runtimes.ControllerName} {
		if crMetric("workqueue_depth", c) > 0 || crMetric("controller_runtime_active_workers", c) > 0 {
			return false
		}
	}
	return true
}

// total adds a counter's series of the given results.
func total(vec *prometheus.CounterVec, results ...string) float64 {
	sum := 0.0
	for _, r := range results {
		sum += testutil.ToFloat64(vec.WithLabelValues(r))
	}
	return sum
}

// reconciled counts Watcher reconciles, of every result.
func reconciled() float64 {
	return total(vsmetrics.VirtualServiceReconciles, "applied", "unchanged", "deleted", "apply-failed")
}

// runtimePasses counts runtime reconciles that reached the SKR, of every
// result.
func runtimePasses() float64 {
	return total(vsmetrics.RuntimeReconciles, "applied", "unchanged", "unreachable", "failed", "invalid-kubeconfig", "removed")
}

// skrClients are vs-controller's runtime clients with the benchmark's
// request counter.
func skrClients(wrap transport.WrapperFunc) *skrclient.KubeconfigClients {
	c := runtimes.SKRClients()
	c.WrapTransport = wrap
	return c
}

type fixture struct {
	env         *testenv.Env
	kcp, skr    *testenv.Cluster // skr: nil with the memory stand-in
	fleet       *memskr.Fleet    // the memory stand-in's clusters
	ca          *pki.CA
	w, r        int
	kcpCount    *counter
	skrCount    *counter
	expectedVWC string
}

func setup(b *testing.B, ctx context.Context) *fixture {
	f := &fixture{w: *numWatchers, r: *numRuntimes, kcpCount: newCounter(), skrCount: newCounter()}
	if testing.Short() {
		f.w, f.r = 100, 50
	}
	var err error
	if f.env, err = testenv.Start("kcp"); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = f.env.Stop() })
	f.kcp = f.env.Cluster("kcp")
	// Valid for a year: a certificate whose CA expires within days is
	// warned about at every pass (an Event write).
	if f.ca, err = pki.NewCAValid("bench CA", time.Now().Add(-time.Hour), time.Now().AddDate(1, 0, 0)); err != nil {
		b.Fatal(err)
	}
	var kubeconfig []byte
	switch *skrMode {
	case skrAPIServer:
		if f.skr, err = startSKR(b); err != nil {
			b.Fatal(err)
		}
		if kubeconfig, err = os.ReadFile(f.skr.KubeconfigPath); err != nil {
			b.Fatal(err)
		}
	case skrMemory:
		f.fleet = memskr.NewFleet(bundle.Scheme(), skrclient.NewRESTMapper(bundle.Kinds()))
		// Not read by the stand-in; a well-formed one all the same.
		if kubeconfig, err = memoryKubeconfig(f.ca.PEM); err != nil {
			b.Fatal(err)
		}
	default:
		b.Fatalf("-vsbench.skr=%q: want %s or %s", *skrMode, skrAPIServer, skrMemory)
	}
	// A fast, uncounted client for the fixture itself.
	fastCfg := rest.CopyConfig(f.kcp.Config)
	fastCfg.QPS, fastCfg.Burst = 1000, 2000
	fast, err := client.New(fastCfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	for _, ns := range []string{kymaNS, gatewayNS, watcherNS} {
		if err := fast.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			b.Fatal(err)
		}
	}
	if err := cmcontrollers.InstallCA(ctx, fast, f.ca, kymaNS, "ca"); err != nil {
		b.Fatal(err)
	}
	gw := &istionetworkingv1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "kcp-gateway", Namespace: gatewayNS, Labels: map[string]string{"app": "watcher"}}}
	gw.Spec.Servers = []*istioapiv1.Server{{Port: &istioapiv1.Port{Number: 443, Name: "https", Protocol: "HTTPS"}, Hosts: []string{"*.kcp.example.com", "gateway.kcp.example.com"}}}
	if err := fast.Create(ctx, gw); err != nil {
		b.Fatal(err)
	}
	parallel(f.w, func(i int) error {
		return fast.Create(ctx, benchWatcher(i))
	}, b)
	parallel(f.r, func(i int) error {
		id := runtimeID(i)
		s := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: kymaNS, Name: skrclient.SecretName(id)},
			Data:       map[string][]byte{skrclient.SecretKey: kubeconfig},
		}
		if !*unlabelled {
			s.Labels = map[string]string{contract.LabelPartOf: contract.PartOf}
		}
		if err := fast.Create(ctx, s); err != nil {
			return err
		}
		k := &unstructured.Unstructured{}
		k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		k.SetNamespace(kymaNS)
		k.SetName(id)
		k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: id + ".skr.example.com"})
		return fast.Create(ctx, k)
	}, b)

	// The VWC every runtime must end with: the same Watchers and CA for all.
	var ws v1beta2.WatcherList
	if err := fast.List(ctx, &ws); err != nil {
		b.Fatal(err)
	}
	want, err := diffapply.Desired(bundle.WebhookConfiguration(bundle.Options{}, ws.Items, f.ca.PEM),
		admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfiguration"))
	if err != nil {
		b.Fatal(err)
	}
	f.expectedVWC = want.GetAnnotations()[diffapply.HashAnnotation]
	return f
}

// memoryKubeconfig is the runtimes' kubeconfig with the memory stand-in.
func memoryKubeconfig(ca []byte) ([]byte, error) {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["skr"] = &clientcmdapi.Cluster{Server: "https://api.skr.example.com", CertificateAuthorityData: ca}
	cfg.AuthInfos["admin"] = &clientcmdapi.AuthInfo{Token: "bench"}
	cfg.Contexts["skr"] = &clientcmdapi.Context{Cluster: "skr", AuthInfo: "admin"}
	cfg.CurrentContext = "skr"
	return clientcmd.Write(*cfg)
}

// startSKR starts a plain API server (no CRDs needed) with a service range
// large enough for one skr-webhook Service per runtime.
func startSKR(b *testing.B) (*testenv.Cluster, error) {
	assets, err := testenv.AssetsDir()
	if err != nil {
		return nil, err
	}
	api := &envtest.APIServer{}
	api.Configure().Set("service-cluster-ip-range", "10.96.0.0/16")
	env := &envtest.Environment{BinaryAssetsDirectory: assets, ControlPlane: envtest.ControlPlane{APIServer: api}}
	cfg, err := env.Start()
	if err != nil {
		return nil, err
	}
	b.Cleanup(func() { _ = env.Stop() })
	user, err := env.AddUser(envtest.User{Name: "skr-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	path := filepath.Join(b.TempDir(), "skr.kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return nil, err
	}
	return &testenv.Cluster{Name: "skr", Config: cfg, Client: c, KubeconfigPath: path}, nil
}

func parallel(n int, fn func(int) error, b *testing.B) {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	sem := make(chan struct{}, 32)
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(i); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
}

// startController runs a vs-controller manager, with the binary's default
// settings, whose KCP and SKR requests are counted.
func (f *fixture) startController(b *testing.B, ctx context.Context) (stop func()) {
	cfg := rest.CopyConfig(f.kcp.Config)
	cfg.QPS, cfg.Burst = float32(*kcpQPS), *kcpBurst // the binary's defaults unless -vsbench.qps/burst
	cfg.Wrap(transport.WrapperFunc(f.kcpCount.wrap))
	var clients skrclient.ClusterClients = &isolated{inner: skrClients(f.skrCount.wrap)}
	if f.fleet != nil {
		clients = &memClients{fleet: f.fleet, count: f.skrCount}
	}
	ctx, cancel := context.WithCancel(ctx)
	mgr, err := vsmanager.New(ctx, cfg, vsmanager.Options{
		MetricsBindAddress:     "0",
		HealthProbeBindAddress: "0",
		GatewayNamespace:       gatewayNS,
		KymaNamespace:          kymaNS,
		Issuer:                 cmmeta.IssuerReference{Name: "ca", Kind: "Issuer", Group: "cert-manager.io"},
		Bundle:                 bundle.Options{KCPAddr: "gateway.kcp.example.com"},
		Clients:                clients,
		SkipNameValidation:     true,
	})
	if err != nil {
		b.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}
}

// converged checks the end state with an uncounted client: every Watcher
// Ready for its generation with a VirtualService, and every runtime's five
// bundle objects in the SKR with the expected webhook configuration.
func (f *fixture) converged(ctx context.Context, c client.Client) (bool, string) {
	var ws v1beta2.WatcherList
	if err := c.List(ctx, &ws, client.InNamespace(watcherNS)); err != nil {
		return false, err.Error()
	}
	ready := 0
	for _, w := range ws.Items {
		if w.Status.State == v1beta2.StateReady && w.Status.ObservedGeneration == w.Generation {
			ready++
		}
	}
	if ready < f.w {
		return false, fmt.Sprintf("%d/%d Watchers ready", ready, f.w)
	}
	if n := countMeta(ctx, c, istionetworkingv1.SchemeGroupVersion.WithKind("VirtualServiceList"), client.InNamespace(watcherNS)); n < f.w {
		return false, fmt.Sprintf("%d/%d VirtualServices", n, f.w)
	}
	if f.fleet != nil {
		return f.convergedInMemory(ctx, c)
	}
	vwcs := &metav1.PartialObjectMetadataList{}
	vwcs.SetGroupVersionKind(admissionregistrationv1.SchemeGroupVersion.WithKind("ValidatingWebhookConfigurationList"))
	skrClient := f.skr.Client
	if err := skrClient.List(ctx, vwcs); err != nil {
		return false, err.Error()
	}
	good := 0
	for _, v := range vwcs.Items {
		if v.Annotations[diffapply.HashAnnotation] == f.expectedVWC {
			good++
		}
	}
	if good < f.r {
		return false, fmt.Sprintf("%d/%d webhook configurations complete (%d VWCs, %d certificates issued)", good, f.r, len(vwcs.Items), issued(ctx, c))
	}
	for _, k := range []schema.GroupVersionKind{
		corev1.SchemeGroupVersion.WithKind("SecretList"),
		corev1.SchemeGroupVersion.WithKind("ServiceList"),
		{Group: "apps", Version: "v1", Kind: "DeploymentList"},
	} {
		if n := countMeta(ctx, skrClient, k, client.MatchingFields{"metadata.name": map[string]string{
			"SecretList": bundle.SecretName, "ServiceList": bundle.Name, "DeploymentList": bundle.Name}[k.Kind]}); n < f.r {
			return false, fmt.Sprintf("%d/%d %s", n, f.r, k.Kind)
		}
	}
	return true, ""
}

// convergedInMemory checks every runtime's in-memory cluster (uncounted):
// the webhook configuration with the expected hash, the Secret, Service and
// Deployment.
func (f *fixture) convergedInMemory(ctx context.Context, c client.Client) (bool, string) {
	good := 0
	for i := range f.r {
		skr := f.fleet.Cluster(kymaNS + "/" + runtimeID(i))
		vwc := &metav1.PartialObjectMetadata{}
		vwc.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
		if skr.Get(ctx, client.ObjectKey{Name: bundle.Name}, vwc) != nil || vwc.Annotations[diffapply.HashAnnotation] != f.expectedVWC {
			continue
		}
		complete := true
		for gvk, name := range map[schema.GroupVersionKind]string{bundle.SecretGVK: bundle.SecretName, bundle.ServiceGVK: bundle.Name, bundle.DeploymentGVK: bundle.Name} {
			m := &metav1.PartialObjectMetadata{}
			m.SetGroupVersionKind(gvk)
			if skr.Get(ctx, client.ObjectKey{Namespace: bundle.DefaultNamespace, Name: name}, m) != nil {
				complete = false
			}
		}
		if complete {
			good++
		}
	}
	if good < f.r {
		return false, fmt.Sprintf("%d/%d runtimes' bundles complete (%d certificates issued)", good, f.r, issued(ctx, c))
	}
	return true, ""
}

// issued counts the runtime certificates' Secrets in the KCP.
func issued(ctx context.Context, c client.Client) int {
	n := 0
	secrets := &metav1.PartialObjectMetadataList{}
	secrets.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("SecretList"))
	if err := c.List(ctx, secrets, client.InNamespace(kymaNS)); err == nil {
		for _, s := range secrets.Items {
			if strings.HasSuffix(s.Name, certificates.Suffix) {
				n++
			}
		}
	}
	return n
}

// eventReasons tallies the KCP's Events by type and reason (with their
// counts), to tell what a pass's Event writes were.
func eventReasons(ctx context.Context, c client.Client) string {
	var evs corev1.EventList
	if err := c.List(ctx, &evs); err != nil {
		return err.Error()
	}
	by := map[string]int32{}
	for _, e := range evs.Items {
		by[e.Type+"/"+e.Reason] += max(e.Count, 1)
	}
	var parts []string
	for k, v := range by {
		parts = append(parts, fmt.Sprintf("%s=%d", k, v))
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

// benchWatcher is the bench's Watcher number i: its own manager and
// resource, selecting the bench's Gateway.
func benchWatcher(i int) *v1beta2.Watcher {
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Namespace: watcherNS, Name: fmt.Sprintf("watcher-%04d", i)},
		Spec: v1beta2.WatcherSpec{
			ServiceInfo:     v1beta2.Service{Name: fmt.Sprintf("operator-%04d", i), Namespace: watcherNS, Port: 8082},
			Manager:         fmt.Sprintf("operator-%04d", i),
			LabelsToWatch:   map[string]string{"operator.kyma-project.io/watched-by": fmt.Sprintf("operator-%04d", i)},
			ResourceToWatch: v1beta2.WatchableGVR{Group: "bench.example.com", Version: "v1", Resource: fmt.Sprintf("things%d", i)},
			Field:           v1beta2.SpecField,
			Gateway:         v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "watcher"}}},
		},
	}
}

// benchLogger sends the controller's log to -vsbench.log, or nowhere; the
// file is closed when b ends.
func benchLogger(b *testing.B) {
	if *logFile == "" {
		ctrl.SetLogger(logr.Discard())
		return
	}
	out, err := os.Create(*logFile)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = out.Close() })
	ctrl.SetLogger(zap.New(zap.WriteTo(out)))
}

func runtimeID(i int) string { return fmt.Sprintf("runtime-%04d", i) }

func countMeta(ctx context.Context, c client.Client, gvk schema.GroupVersionKind, opts ...client.ListOption) int {
	l := &metav1.PartialObjectMetadataList{}
	l.SetGroupVersionKind(gvk)
	if err := c.List(ctx, l, opts...); err != nil {
		return -1
	}
	return len(l.Items)
}

// runCertManager runs cert-manager's controllers and kube-controller-manager
// on the KCP until ctx ends. cert-manager's client rate is raised well above
// its default (20/s): what is measured is vs-controller, not how fast
// cert-manager may write.
func (f *fixture) runCertManager(b *testing.B, ctx context.Context) {
	if err := f.kcp.StartControllerManager(); err != nil {
		b.Fatal(err)
	}
	go func() {
		if err := cmcontrollers.Run(ctx, cmcontrollers.Options{Kubeconfig: f.kcp.KubeconfigPath, QPS: 500, Burst: 1000}); err != nil && ctx.Err() == nil {
			panic(err)
		}
	}()
}

// BenchmarkSteadyState: cold start to steady state with 1,000 Watchers and
// 500 runtimes (-vsbench.watchers, -vsbench.runtimes), then a restarted
// controller's full pass, which must write nothing. Steady state: every
// Watcher Ready with its VirtualService, every runtime's bundle complete
// with the expected webhook configuration, both work queues empty and idle.
func BenchmarkSteadyState(b *testing.B) {
	benchLogger(b)
	ctx := b.Context()
	f := setup(b, ctx)
	f.runCertManager(b, ctx)
	check, err := client.New(f.kcp.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		b.Fatal(err)
	}
	if f.fleet != nil {
		b.Logf("fixture: %d Watchers, %d runtimes (SKR stand-in: an in-memory cluster per runtime); KCP client QPS %v, burst %d", f.w, f.r, *kcpQPS, *kcpBurst)
	} else {
		b.Logf("fixture: %d Watchers, %d runtimes (all pointing at one SKR API server, isolated by namespace); KCP client QPS %v, burst %d", f.w, f.r, *kcpQPS, *kcpBurst)
	}

	for b.Loop() {
		f.kcpCount.reset()
		f.skrCount.reset()
		start := time.Now()
		stop := f.startController(b, ctx)
		last, lastLog := "", time.Now()
		for {
			ok, why := f.converged(ctx, check)
			if ok && idle() {
				break
			}
			if why != last && time.Since(lastLog) > 10*time.Second {
				// Progress goes to stderr at once; b.Logf shows only at the end.
				fmt.Fprintf(os.Stderr, "vsbench %5.0fs: %s; runtime queue %v, errors %v, retries %v\n", time.Since(start).Seconds(), why,
					crMetric("workqueue_depth", runtimes.ControllerName),
					crMetric("controller_runtime_reconcile_errors_total", runtimes.ControllerName),
					crMetric("workqueue_retries_total", runtimes.ControllerName))
				last, lastLog = why, time.Now()
			}
			if time.Since(start) > *maxWait {
				b.Fatalf("no steady state after %s: %s", *maxWait, why)
			}
			waitTick(ctx, 2*time.Second)
		}
		converge := time.Since(start)
		retries := crMetric("workqueue_retries_total", runtimes.ControllerName)
		wretries := crMetric("workqueue_retries_total", routing.ControllerName)
		heap := heapInuse()
		// Events are posted asynchronously, behind the reconciles: let the
		// controller's KCP writes stop before stopping it, so that the
		// cold start's Events count in it, not in the second pass.
		for prev := int64(-1); prev != f.kcpCount.write.Load(); waitTick(ctx, 3*time.Second) {
			prev = f.kcpCount.write.Load()
		}
		stop()
		kcpWrites, skrWrites := f.kcpCount.write.Load(), f.skrCount.write.Load()
		kcpReq, skrReq := f.kcpCount.total.Load(), f.skrCount.total.Load()
		b.Logf("converged in %s: KCP %d writes (%d requests): %s", converge.Round(time.Millisecond), kcpWrites, kcpReq, f.kcpCount.breakdown())
		b.Logf("                SKR %d writes (%d requests): %s", skrWrites, skrReq, f.skrCount.breakdown())
		b.Logf("                Events so far: %s", eventReasons(ctx, check))
		b.Logf("                workqueue retries: %v runtime, %v Watcher; heap in use after GC %d MiB", retries, wretries, heap>>20)

		// Second pass: a restarted controller reconciles everything again.
		f.kcpCount.reset()
		f.skrCount.reset()
		w0, r0 := reconciled(), runtimePasses()
		start2 := time.Now()
		stop = f.startController(b, ctx)
		for reconciled()-w0 < float64(f.w) || runtimePasses()-r0 < float64(f.r) || !idle() || time.Since(start2) < 3*time.Second {
			if time.Since(start2) > *maxWait {
				b.Fatalf("second pass incomplete: %v Watchers, %v runtimes", reconciled()-w0, runtimePasses()-r0)
			}
			waitTick(ctx, 200*time.Millisecond)
		}
		pass2 := time.Since(start2)
		stop()
		w2, k2req, s2req := f.kcpCount.write.Load()+f.skrCount.write.Load(), f.kcpCount.total.Load(), f.skrCount.total.Load()
		b.Logf("second pass in %s: %v Watcher and %v runtime reconciles, %d writes (%s %s), %d KCP + %d SKR requests (reads)",
			pass2.Round(time.Millisecond), reconciled()-w0, runtimePasses()-r0, w2, f.kcpCount.breakdown(), f.skrCount.breakdown(), k2req, s2req)
		b.Logf("                Events so far: %s", eventReasons(ctx, check))
		if w2 != 0 {
			b.Errorf("the second pass wrote %d times", w2)
		}
		b.ReportMetric(converge.Seconds(), "converge-s")
		b.ReportMetric(float64(kcpWrites), "kcp-writes")
		b.ReportMetric(float64(skrWrites), "skr-writes")
		b.ReportMetric(float64(w2), "pass2-writes")
		b.ReportMetric(pass2.Seconds(), "pass2-s")
		b.ReportMetric(float64(f.r)/converge.Seconds(), "runtimes/s")
		b.ReportMetric(float64(kcpReq+skrReq)/float64(f.r), "requests/runtime")
		b.ReportMetric(float64(k2req+s2req)/float64(f.r), "pass2-requests/runtime")
		b.ReportMetric(float64(heap)/(1<<20), "heap-inuse-MiB")
		b.ReportMetric(retries, "runtime-retries")
		b.ReportMetric(float64(kcpWrites)/float64(f.r), "kcp-writes/runtime")
		if hwm, err := vmHWM(); err == nil {
			b.ReportMetric(float64(hwm)/(1<<20), "process-hwm-MiB")
		}
	}
}

// heapInuse is the Go heap in use after a GC: the controller's caches
// (KCP informers, SKR clients) plus the fixture's clients, which are small.
func heapInuse() uint64 {
	goruntime.GC()
	var ms goruntime.MemStats
	goruntime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// vmHWM is the peak resident memory of the benchmark process (controller
// and fixture; the API servers are other processes).
func vmHWM() (int64, error) {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb int64
			_, err := fmt.Sscanf(strings.TrimSpace(v), "%d kB", &kb)
			return kb << 10, err
		}
	}
	return 0, fmt.Errorf("no VmHWM")
}

func waitTick(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
