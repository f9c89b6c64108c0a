// Package bench measures module-sync at scale against real API servers:
// 1,000 runtimes × 5 modules (one Module CR of each of 5 CRDs per runtime)
// from a cold start until every ModuleConfig exists, the requests to the
// runtimes per runtime in that first pass, and a second, periodic pass that
// must write nothing.
//
// All runtimes' kubeconfigs point at one real SKR API server (as in
// vs-controller/bench), which holds the 5 Module CRs every runtime
// mirrors. Each runtime still gets its own client (and REST mapper), so the
// requests are what 1,000 real runtimes would get.
package bench_test

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmetrics"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var (
	numRuntimes = flag.Int("msbench.runtimes", 1000, "runtimes (Kyma CRs) in the benchmark")
	numModules  = flag.Int("msbench.modules", 5, "Module CRDs, one CR of each per runtime")
	interval    = flag.Duration("msbench.interval", 30*time.Second, "module-sync's --mirror-interval: the second pass starts this long after the first")
)

const kymaNS = "kcp-system"

// BenchmarkMirror1000Runtimes reports s-to-converge (start → all
// ModuleConfigs), skr-req/runtime-first and skr-req/runtime-pass (requests
// to the runtime per runtime in the first and in a periodic pass), and
// kcp-writes-second-pass (must be 0).
func BenchmarkMirror1000Runtimes(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(logOutput())))
	for range b.N {
		benchMirror(b, *numRuntimes, *numModules)
	}
}

func benchMirror(b *testing.B, runtimes, modules int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	env, err := testenv.Start("kcp", "skr")
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kcp, skr := env.Cluster("kcp"), env.Cluster("skr")

	// The SKR: modules CRDs with one Module CR each.
	var resources []mirror.ModuleResource
	if err := skr.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kyma-system"}}); err != nil {
		b.Fatal(err)
	}
	for i := range modules {
		group := fmt.Sprintf("mod%d.bench.kyma-project.io", i)
		crd := moduleCRD(group)
		if err := skr.Client.Create(ctx, crd); err != nil {
			b.Fatal(err)
		}
		resources = append(resources, mirror.ModuleResource{Module: fmt.Sprintf("mod%d", i),
			GroupVersionResource: schema.GroupVersionResource{Group: group, Version: "v1", Resource: "modules"}})
	}
	for i := range modules {
		cr := &unstructured.Unstructured{}
		cr.SetAPIVersion(fmt.Sprintf("mod%d.bench.kyma-project.io/v1", i))
		cr.SetKind("Module")
		cr.SetNamespace("kyma-system")
		cr.SetName("default")
		cr.Object["spec"] = map[string]any{"replicas": int64(i), "greeting": "hello"}
		if err := createWhenServed(ctx, skr.Client, cr); err != nil {
			b.Fatal(err)
		}
	}

	// The KCP: runtimes Kymas with their kubeconfig Secrets.
	kubeconfig, err := os.ReadFile(skr.KubeconfigPath)
	if err != nil {
		b.Fatal(err)
	}
	if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNS}}); err != nil {
		b.Fatal(err)
	}
	for i := range runtimes {
		id := fmt.Sprintf("runtime-%04d", i)
		if err := createRuntime(ctx, kcp.Client, id, kubeconfig); err != nil {
			b.Fatal(err)
		}
	}

	// module-sync as its flags default it in production (KCP QPS 50, burst 100).
	cfg := *kcp.Config
	cfg.QPS, cfg.Burst = 50, 100
	mgr, err := syncmanager.New(ctx, &cfg, syncmanager.Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", KymaNamespace: kymaNS,
		ListenAddr: "127.0.0.1:0", ModuleResources: resources,
		Service:        v1beta2.Service{Name: "module-sync", Namespace: kymaNS, Port: 8082},
		MirrorInterval: *interval, DriftInterval: time.Hour,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	reqs0, writes0, passes0 := sum(syncmetrics.SKRRequests), sum(syncmetrics.MirrorWrites), sum(syncmetrics.MirrorPasses)
	began := time.Now()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			b.Error(err)
		}
	}()
	want := runtimes * modules
	if err := waitFor(ctx, 15*time.Minute, func() (bool, error) {
		list := &v1alpha1.ModuleConfigList{}
		if err := kcp.Client.List(ctx, list, client.InNamespace(kymaNS)); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if list.Items[i].Status.State == v1alpha1.StateReady {
				ready++
			}
		}
		return ready == want, nil
	}); err != nil {
		b.Fatal(err)
	}
	converged := time.Since(began)
	// The first pass of each runtime is done (every ModuleConfig is Ready).
	if err := waitFor(ctx, time.Minute, func() (bool, error) {
		return sum(syncmetrics.MirrorPasses)-passes0 >= float64(runtimes), nil
	}); err != nil {
		b.Fatal(err)
	}
	reqs1, writes1, passes1 := sum(syncmetrics.SKRRequests), sum(syncmetrics.MirrorWrites), sum(syncmetrics.MirrorPasses)
	b.ReportMetric(converged.Seconds(), "s-to-converge")
	b.ReportMetric((reqs1-reqs0)/float64(runtimes), "skr-req/runtime-first")
	b.ReportMetric(writes1-writes0, "kcp-writes-first")
	b.ReportMetric(passes1-passes0, "passes-first")

	// The periodic pass of every runtime.
	if err := waitFor(ctx, *interval*3+5*time.Minute, func() (bool, error) {
		return sum(syncmetrics.MirrorPasses)-passes1 >= float64(runtimes), nil
	}); err != nil {
		b.Fatal(err)
	}
	reqs2, writes2, passes2 := sum(syncmetrics.SKRRequests), sum(syncmetrics.MirrorWrites), sum(syncmetrics.MirrorPasses)
	b.ReportMetric((reqs2-reqs1)/(passes2-passes1), "skr-req/runtime-pass")
	b.ReportMetric(writes2-writes1, "kcp-writes-second-pass")
	if writes2 != writes1 {
		b.Errorf("the periodic pass wrote %v ModuleConfigs; nothing changed", writes2-writes1)
	}
}

// sum is the total of a counter vector over all its labels.
func sum(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	total := 0.0
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err == nil {
			total += d.GetCounter().GetValue()
		}
	}
	return total
}

func waitFor(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// moduleCRD is a namespaced Module CRD "modules" of group, version v1.
func moduleCRD(group string) *apiextensionsv1.CustomResourceDefinition {
	return &apiextensionsv1.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: "modules." + group},
		Spec: apiextensionsv1.CustomResourceDefinitionSpec{
			Group: group, Scope: apiextensionsv1.NamespaceScoped,
			Names: apiextensionsv1.CustomResourceDefinitionNames{Kind: "Module", ListKind: "ModuleList", Plural: "modules", Singular: "module"},
			Versions: []apiextensionsv1.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Schema: &apiextensionsv1.CustomResourceValidation{OpenAPIV3Schema: &apiextensionsv1.JSONSchemaProps{
					Type: "object",
					Properties: map[string]apiextensionsv1.JSONSchemaProps{
						"spec": {Type: "object", XPreserveUnknownFields: ptr(true)},
					},
				}},
			}},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// createRuntime creates runtime id in the KCP as a real one is: its
// kubeconfig Secret (labelled, so module-sync's cache holds it) and its Kyma.
func createRuntime(ctx context.Context, c client.Client, id string, kubeconfig []byte) error {
	if err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: skrclient.SecretName(id), Namespace: kymaNS,
		Labels: map[string]string{contract.LabelPartOf: contract.PartOf}},
		Data: map[string][]byte{skrclient.SecretKey: kubeconfig}}); err != nil {
		return err
	}
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(kymaNS)
	kyma.SetName(id)
	kyma.SetLabels(map[string]string{contract.LabelRuntimeID: id})
	return c.Create(ctx, kyma)
}

// createWhenServed creates obj once its CRD is served.
func createWhenServed(ctx context.Context, c client.Client, obj client.Object) error {
	var last error
	err := waitFor(ctx, time.Minute, func() (bool, error) {
		last = c.Create(ctx, obj)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w: %v", err, last)
	}
	return nil
}

// logOutput is module-sync's log: MSBENCH_LOG=1 shows it on stderr.
func logOutput() io.Writer {
	if os.Getenv("MSBENCH_LOG") != "" {
		return os.Stderr
	}
	return io.Discard
}
