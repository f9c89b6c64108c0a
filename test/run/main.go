// Command run is what `make run` starts: the whole of Runtime Watcher on
// this machine (see test/localenv). Once it is up, it changes a watched Kyma
// in the SKR every few seconds and prints, for each change, what the example
// operator in the KCP received and how long it took from the SKR write to the
// operator. It also edits the demo Module CR (a Sample) in the SKR and prints
// when module-sync's ModuleConfig in the KCP changed and when the object the
// example module manager derives from it (ConfigMap sample-config) changed
// back in the SKR, with the round-trip time. Ctrl-C stops everything and
// removes the temporary files.
//
// Cleaning up does not depend on stdout: it comes first, and writes to a
// closed stdout (`make run | tee log` with tee stopped by the same Ctrl-C)
// fail quietly. Every process it starts dies with it, even on SIGKILL
// (Linux's parent-death signal; kube-apiserver, etcd and kube-controller-manager through a
// link to this program, see apiServerShim), and a run that was killed is
// cleaned up by the next one (localenv.ClaimRun).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Environment of the kube-apiserver and etcd shims: where the real binaries
// are, and the runner's pid.
const (
	envRealAssets = "RUNTIME_WATCHER_RUN_REAL_ASSETS"
	// The real SKR kube-apiserver's folder (testenv.SKRAssetsDir): a shim
	// started from the "assets-skr" folder execs that one.
	envRealSKRAssets = "RUNTIME_WATCHER_RUN_REAL_SKR_ASSETS"
	envRunnerPID     = "RUNTIME_WATCHER_RUN_PID"
)

func main() {
	if err := apiServerShim(); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
	interval := flag.Duration("interval", 3*time.Second, "how often the demo changes the watched Kyma in the SKR")
	flag.Parse()
	if err := run(*interval); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

// demoKyma is the SKR object the demo changes.
var demoKyma = client.ObjectKey{Namespace: localenv.SKRNamespace, Name: "default"}

func run(interval time.Duration) (err error) {
	ctx, stop := localenv.NotifyStop(context.Background())
	defer stop()

	realAssets, err := testenv.AssetsDir()
	if err != nil {
		return err
	}
	realSKRAssets, err := testenv.SKRAssetsDir()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "runtime-watcher-run-")
	if err != nil {
		return err
	}
	record, cleaned, err := localenv.ClaimRun(localenv.DefaultRunStateDir(), dir)
	if err != nil {
		_ = os.RemoveAll(dir)
		return err
	}
	for _, c := range cleaned {
		fmt.Println("Cleaned up after a previous run that was killed:", c)
	}
	var sys *localenv.System
	var logFile *os.File
	// Cleaning up comes first and prints nothing until it is done.
	defer func() {
		var errs []error
		if sys != nil {
			errs = append(errs, sys.Stop())
		}
		if logFile != nil {
			_ = logFile.Close()
		}
		errs = append(errs, os.RemoveAll(dir))
		if e := errors.Join(errs...); e == nil {
			errs = append(errs, record.Release()) // keep the record while anything may be left
		}
		fmt.Println("\nStopped every process and API server, removed", dir)
		if e := errors.Join(errs...); e != nil && err == nil {
			err = fmt.Errorf("stop: %w", e)
		}
	}()

	// envtest's own temporary folders (etcd's data, the API servers'
	// certificates) go into dir too, so nothing is left outside it.
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o700); err != nil {
		return err
	}
	if err := os.Setenv("TMPDIR", filepath.Join(dir, "tmp")); err != nil {
		return err
	}
	if err := installShims(dir, realAssets, realSKRAssets); err != nil {
		return err
	}

	// This program's own logs (API server start-up, the in-process
	// controllers) go to a file beside the processes' logs.
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return err
	}
	logFile, err = os.Create(filepath.Join(dir, "logs", "make-run.log"))
	if err != nil {
		return err
	}
	log := zap.New(zap.WriteTo(logFile))
	ctrl.SetLogger(log)

	began := time.Now()
	fmt.Println("Runtime Watcher — local environment (no containers: real API servers, kube-controller-manager, cert-manager, istiod and Envoy, real binaries)")
	fmt.Println("Starting:")
	sys, err = localenv.Start(ctx, localenv.Options{Dir: dir, Progress: os.Stdout, Log: log})
	if err != nil {
		sys = nil // Start stopped what it had started
		return err
	}
	if err := record.TrackChildren(); err != nil {
		return err
	}
	fmt.Printf("Up in %s.\n\n", time.Since(began).Round(100*time.Millisecond))
	explain(sys, filepath.Join(realAssets, "kubectl"))

	loop, err := sys.WatchModuleLoop(ctx)
	if err != nil {
		return err
	}
	sent := map[string]time.Time{} // greeting -> when the demo wrote it to the Sample
	writes := time.NewTicker(interval)
	defer writes.Stop()
	var pending time.Time // when the demo's last unanswered write happened
	n := 0
	if pending, err = changeKyma(ctx, sys, 0); err != nil {
		return err
	}
	if err := changeSample(ctx, sys, 0, sent); err != nil {
		return err
	}
	firstAt := time.Time{}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-writes.C:
			n++
			if pending, err = changeKyma(ctx, sys, n); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintln(os.Stderr, "  ! SKR write failed:", err)
			}
			if err := changeSample(ctx, sys, n, sent); err != nil {
				if ctx.Err() != nil {
					return nil
				}
				fmt.Fprintln(os.Stderr, "  ! SKR write failed:", err)
			}
		case o := <-loop:
			printObservation(o, sent)
		case ev := <-sys.Events:
			if firstAt.IsZero() {
				firstAt = ev.Time
				fmt.Printf("  (first event %s after `make run` started)\n", firstAt.Sub(began).Round(100*time.Millisecond))
			}
			// A resync answers no write: it does not end the wait for one.
			var since time.Time
			if ev.Resync == "" && !pending.IsZero() && !ev.Time.Before(pending) {
				since, pending = pending, time.Time{}
			}
			fmt.Println(receivedLine(ev, since))
		}
	}
}

// receivedLine is the line `make run` prints for an event the example
// operator received: a change names the watched object and, when it
// answers the demo's write made at written (non-zero), the time from that
// write; a resync names its reason, as the operator re-reads the whole
// runtime then.
func receivedLine(ev localenv.ReceivedEvent, written time.Time) string {
	at := ev.Time.Format("15:04:05.000")
	if ev.Resync != "" {
		return fmt.Sprintf("  %s  operator received: runtime %q, %s resync (it re-reads the whole runtime)", at, ev.RuntimeID, ev.Resync)
	}
	latency := "(a write not made by this demo)"
	if !written.IsZero() {
		latency = fmt.Sprintf("SKR write → operator: %s", ev.Time.Sub(written).Round(100*time.Microsecond))
	}
	return fmt.Sprintf("  %s  operator received: runtime %q, %s %s/%s (%s/%s)  %s",
		at, ev.RuntimeID, ev.GVK.Kind, ev.Watched.Namespace, ev.Watched.Name, ev.GVK.Group, ev.GVK.Version, latency)
}

// skrShims is the folder of the SKR's kube-apiserver shim, beside "assets".
const skrShims = "assets-skr"

// installShims points envtest (KUBEBUILDER_ASSETS) at <dir>/assets, where
// every binary testenv runs from there (testenv.AssetBinaries:
// kube-apiserver, etcd, kube-controller-manager) is a link to this program,
// and testenv's SKR API server (SKR_KUBEBUILDER_ASSETS) at
// <dir>/assets-skr/kube-apiserver, another link: started under one of those
// names, it makes itself die with the runner and execs the real binary
// (apiServerShim). envtest offers no other way to set the parent-death
// signal on the processes it starts.
func installShims(dir, realAssets, realSKRAssets string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	shims, skr := filepath.Join(dir, "assets"), filepath.Join(dir, skrShims)
	for _, d := range []string{shims, skr} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, name := range testenv.AssetBinaries {
		if err := os.Symlink(self, filepath.Join(shims, name)); err != nil {
			return err
		}
	}
	if err := os.Symlink(self, filepath.Join(skr, "kube-apiserver")); err != nil {
		return err
	}
	for k, v := range map[string]string{
		envRealAssets:            realAssets,
		envRealSKRAssets:         realSKRAssets,
		envRunnerPID:             strconv.Itoa(os.Getpid()),
		"KUBEBUILDER_ASSETS":     shims,
		"SKR_KUBEBUILDER_ASSETS": skr,
	} {
		if err := os.Setenv(k, v); err != nil {
			return err
		}
	}
	return nil
}

// apiServerShim runs when this program was started as one of
// testenv.AssetBinaries (see installShims): it does not return then.
func apiServerShim() error {
	name := filepath.Base(os.Args[0])
	if !slices.Contains(testenv.AssetBinaries, name) {
		return nil
	}
	parent, err := strconv.Atoi(os.Getenv(envRunnerPID))
	if err != nil {
		return fmt.Errorf("%s shim: %s: %w", name, envRunnerPID, err)
	}
	realDir := os.Getenv(envRealAssets)
	if filepath.Base(filepath.Dir(os.Args[0])) == skrShims {
		realDir = os.Getenv(envRealSKRAssets)
	}
	real := filepath.Join(realDir, name)
	return localenv.ExecDyingWithParent(real, append([]string{real}, os.Args[1:]...), parent)
}

func explain(sys *localenv.System, kubectl string) {
	fmt.Printf(`What you see below: every few seconds this program changes spec.data of the Kyma %s in the
SKR. The SKR API server calls the skr-webhook (ValidatingWebhookConfiguration from vs-controller),
which answers at once and posts the event over mTLS to the KCP gateway; ext-authz checks that the
client certificate's SAN is the skr-domain of Kyma %s/%s (SAN pinning); the VirtualService that
vs-controller made routes it to the example operator, which prints what it received.

Module sync: the demo also edits the Module CR Sample %s/%s in the SKR. Its Watcher (manager
module-sync) sends the event to module-sync, which mirrors the CR into ModuleConfig %s in the KCP;
the example module manager turns that into SyncResource %s, which module-sync applies into the
SKR (ConfigMap %s with the greeting, Deployment %s-workload with spec.replicas).

Make your own changes (label %s=%s selects what is watched):
  %s --kubeconfig %s -n %s edit kymas.operator.kyma-project.io %s
  %s --kubeconfig %s -n %s edit samples.sample.kyma-project.io %s
  %s --kubeconfig %s get watchers,virtualservices,certificates,moduleconfigs,syncresources -A
Logs of every process: %s
Ctrl-C stops everything.

`, demoKyma, localenv.KymaNamespace, localenv.RuntimeID,
		localenv.SKRNamespace, localenv.SampleName, localenv.SampleModuleConfig(), localenv.SampleModuleConfig(),
		localenv.SampleConfigMap, localenv.SampleModule,
		localenv.WatchedLabel, localenv.Manager,
		kubectl, sys.SKR.KubeconfigPath, demoKyma.Namespace, demoKyma.Name,
		kubectl, sys.SKR.KubeconfigPath, localenv.SKRNamespace, localenv.SampleName,
		kubectl, sys.KCP.KubeconfigPath, filepath.Join(sys.Dir, "logs"))
}

// changeSample creates the demo Module CR (n = 0) or changes its
// spec.greeting and spec.replicas, remembering when.
func changeSample(ctx context.Context, sys *localenv.System, n int, sent map[string]time.Time) error {
	greeting := fmt.Sprintf("hello-%d", n)
	replicas := int64(n%3 + 1)
	at, err := sys.SetSampleGreeting(ctx, greeting, replicas)
	if err != nil {
		return err
	}
	sent[greeting] = at
	delete(sent, fmt.Sprintf("hello-%d", n-20)) // bounded
	fmt.Printf("  %s  SKR: set spec.greeting=%s spec.replicas=%d on Module CR Sample %s/%s\n",
		at.Format("15:04:05.000"), greeting, replicas, localenv.SKRNamespace, localenv.SampleName)
	return nil
}

// printObservation prints a step of the module loop with its time since
// the Module CR edit.
func printObservation(o localenv.Observation, sent map[string]time.Time) {
	since := "(not an edit of this demo)"
	if at, ok := sent[o.Greeting]; ok {
		since = o.Time.Sub(at).Round(100 * time.Microsecond).String()
	}
	switch o.Where {
	case "kcp":
		fmt.Printf("  %s  KCP: ModuleConfig %s mirrors greeting=%s  Module CR edit → ModuleConfig: %s\n",
			o.Time.Format("15:04:05.000"), localenv.SampleModuleConfig(), o.Greeting, since)
	default:
		fmt.Printf("  %s  SKR: ConfigMap %s/%s synced greeting=%s  round trip SKR → KCP → SKR: %s\n",
			o.Time.Format("15:04:05.000"), localenv.SKRNamespace, localenv.SampleConfigMap, o.Greeting, since)
	}
}

// changeKyma creates the demo Kyma (n = 0) or changes its spec, and returns
// when the write happened.
func changeKyma(ctx context.Context, sys *localenv.System, n int) (time.Time, error) {
	c := sys.SKR.Client
	if n == 0 {
		if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: demoKyma.Namespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return time.Time{}, err
		}
		kyma := &unstructured.Unstructured{}
		kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		kyma.SetNamespace(demoKyma.Namespace)
		kyma.SetName(demoKyma.Name)
		kyma.SetLabels(map[string]string{localenv.WatchedLabel: localenv.Manager})
		_ = unstructured.SetNestedField(kyma.Object, "0", "spec", "data")
		at := time.Now()
		fmt.Printf("  %s  SKR: created Kyma %s\n", at.Format("15:04:05.000"), demoKyma)
		return at, c.Create(ctx, kyma)
	}
	patch := []byte(fmt.Sprintf(`{"spec":{"data":"%d"}}`, n))
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(demoKyma.Namespace)
	kyma.SetName(demoKyma.Name)
	at := time.Now()
	fmt.Printf("  %s  SKR: set spec.data=%d on Kyma %s\n", at.Format("15:04:05.000"), n, demoKyma)
	return at, c.Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", patch))
}
