package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/test/admissionhold"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Fleet of BenchmarkHostileRuntime.
const (
	healthyRuntimes = 100
	hostileSRs      = 30 // SyncResources of the hostile runtime
	itemsPerSR      = 5
	holdFor         = 10 * time.Second // the hostile webhook holds every write this long
)

// benchWriter is the module manager the grant names and every
// SyncResource records as its writer (no writer policy runs here: the
// annotation is set as the policy would require).
const benchWriter = "system:serviceaccount:kcp-system:bench-manager"

// BenchmarkHostileRuntime: 100 healthy runtimes, each with a SyncResource
// of 5 ConfigMaps, converge (every SyncResource Ready) in s-healthy-alone;
// with one more runtime whose admission webhook holds every write for 10 s
// and that has 30 SyncResources, in s-healthy-with-hostile. ARCHITECTURE
// §3.12 asks for a ratio of at most 2 (reported as ratio; an error above).
// Both runs use real API servers: the KCP, one SKR all healthy runtimes
// share (each with its own client), and the hostile runtime's own SKR that
// really calls the holding webhook.
//
// The same run also measures the hostile fleet with pacing.Turns off
// (s-healthy-with-hostile-no-turns, ratio-no-turns): that it is Turns
// which holds the bound is shown, not assumed (issue 33). Only the run
// with Turns on must stay within 2×.
func BenchmarkHostileRuntime(b *testing.B) {
	ctrl.SetLogger(zap.New(zap.WriteTo(logOutput())))
	for range b.N {
		alone := fleet(b, false, false)
		with := fleet(b, true, false)
		without := fleet(b, true, true)
		b.ReportMetric(alone.Seconds(), "s-healthy-alone")
		b.ReportMetric(with.Seconds(), "s-healthy-with-hostile")
		b.ReportMetric(without.Seconds(), "s-healthy-with-hostile-no-turns")
		ratio := with.Seconds() / alone.Seconds()
		b.ReportMetric(ratio, "ratio")
		b.ReportMetric(without.Seconds()/alone.Seconds(), "ratio-no-turns")
		if ratio > 2 {
			b.Errorf("one hostile runtime slowed 100 healthy ones by %.2f× (%s → %s), more than 2×", ratio, alone, with)
		}
	}
}

// fleet runs module-sync over the healthy runtimes (and the hostile one)
// and returns how long until every healthy SyncResource is Ready.
func fleet(b *testing.B, hostile, noTurns bool) time.Duration {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	names := []string{"kcp", "skr"}
	if hostile {
		names = append(names, "skr-hostile")
	}
	env, err := testenv.Start(names...)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = env.Stop() }()
	kcp := env.Cluster("kcp")
	for _, c := range names[1:] {
		if err := env.Cluster(c).Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bench"}}); err != nil {
			b.Fatal(err)
		}
	}
	if hostile {
		if err := holdWrites(ctx, env.Cluster("skr-hostile").Client); err != nil {
			b.Fatal(err)
		}
	}
	if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: kymaNS}}); err != nil {
		b.Fatal(err)
	}
	if err := kcp.Client.Create(ctx, &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: "bench", Namespace: kymaNS},
		Spec: v1alpha1.ModuleGrantSpec{Managers: []string{benchWriter}, Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}}, Namespaces: []string{"bench"}}}); err != nil {
		b.Fatal(err)
	}
	runtime := func(id, cluster string, srs int) {
		kubeconfig, err := os.ReadFile(env.Cluster(cluster).KubeconfigPath)
		if err != nil {
			b.Fatal(err)
		}
		if err := createRuntime(ctx, kcp.Client, id, kubeconfig); err != nil {
			b.Fatal(err)
		}
		for s := range srs {
			sr := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%02d", id, s), Namespace: kymaNS,
				Annotations: map[string]string{v1alpha1.AnnotationWrittenBy: benchWriter}},
				Spec: v1alpha1.SyncResourceSpec{Kyma: id, Module: "bench"}}
			for i := range itemsPerSR {
				name := fmt.Sprintf("%s-%02d-%d", id, s, i)
				raw, _ := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
					"metadata": map[string]any{"name": name, "namespace": "bench"}, "data": map[string]any{"k": "v"}})
				sr.Spec.Items = append(sr.Spec.Items, v1alpha1.SyncItem{Name: fmt.Sprint("cm-", i), Strategy: v1alpha1.CreateAndSync,
					Resource: k8sruntime.RawExtension{Raw: raw}})
			}
			if err := kcp.Client.Create(ctx, sr); err != nil {
				b.Fatal(err)
			}
		}
	}
	if hostile {
		runtime("skr-hostile", "skr-hostile", hostileSRs)
	}
	for i := range healthyRuntimes {
		runtime(fmt.Sprintf("runtime-%03d", i), "skr", 1)
	}

	cfg := *kcp.Config
	cfg.QPS, cfg.Burst = 50, 100
	mgr, err := syncmanager.New(ctx, &cfg, syncmanager.Options{
		MetricsBindAddress: "0", HealthProbeBindAddress: "0", KymaNamespace: kymaNS, ListenAddr: "127.0.0.1:0",
		// One listener per manager name registers metrics: one name per run.
		Manager:            fmt.Sprintf("module-sync-%v-%v", hostile, noTurns),
		NoTurns:            noTurns,
		SkipNameValidation: true,
		ModuleResources: []mirror.ModuleResource{{Module: "bench", GroupVersionResource: schema.GroupVersionResource{
			Group: "bench.kyma-project.io", Version: "v1", Resource: "modules"}}},
		Service:        v1beta2.Service{Name: "module-sync", Namespace: kymaNS, Port: 8082},
		MirrorInterval: time.Hour, DriftInterval: time.Hour,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	began := time.Now()
	go func() {
		if err := mgr.Start(ctx); err != nil {
			b.Error(err)
		}
	}()
	if err := waitFor(ctx, 15*time.Minute, func() (bool, error) {
		list := &v1alpha1.SyncResourceList{}
		if err := kcp.Client.List(ctx, list, client.InNamespace(kymaNS)); err != nil {
			return false, err
		}
		ready := 0
		for i := range list.Items {
			if list.Items[i].Spec.Kyma != "skr-hostile" && list.Items[i].Status.State == v1alpha1.StateReady {
				ready++
			}
		}
		return ready == healthyRuntimes, nil
	}); err != nil {
		b.Fatal(err)
	}
	return time.Since(began)
}

// holdWrites makes the cluster's API server call a webhook that holds
// every ConfigMap write for holdFor before it allows it.
func holdWrites(ctx context.Context, c client.Client) error {
	return admissionhold.Install(ctx, c, "hold-every-write", admissionhold.ConfigMaps, func(ctx context.Context, _ *admissionv1.AdmissionRequest) {
		select {
		case <-time.After(holdFor):
		case <-ctx.Done():
		}
	})
}
