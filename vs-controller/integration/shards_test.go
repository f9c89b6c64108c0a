package integration_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	"github.com/go-logr/logr"
	"github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/admissionhold"
	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/shardaudit"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

// vsShardsAudit records every write of a shard member's Lease with the
// Lease itself, and every write of a Kyma or a Certificate (the KCP
// objects a runtime's pass writes).
var vsShardsAudit = shardaudit.Policy(`[{group: "cert-manager.io", resources: ["certificates", "certificates/status"]}, {group: "operator.kyma-project.io", resources: ["kymas"]}]`)

const (
	vsShardsRuntimes = 12
	vsShardsLease    = 3 * time.Second
)

// TestShards runs vs-controller as 3 processes with --leader-elect and
// --shard-identity against real KCP and SKR API servers, with cert-manager's
// own controllers issuing the runtime certificates and the CA rotation on
// (the trust keeper: the elected replica keeps the bundles, the others
// follow). Every runtime's pass must complete — its Certificate carries
// the trust evidence of what its SKR was given, whichever replica pushed
// it. Then membership changes: the owner of a runtime is SIGKILLed, a
// replica is added, one stops (SIGTERM), one is stopped mid-pass (SIGSTOP
// while the KCP's admission holds its Certificate write) until the others
// took its runtimes, and resumed; after each change every Kyma's
// skr-domain changes and every runtime's Certificate must follow within
// 30 s. Finally, from the KCP API server's audit log alone (Lease writes
// with their published views; Kyma and Certificate writes with the replica
// in the user agent): no runtime was written by two replicas in one Lease
// period, every write was under its writer's live claim, and no runtime
// moved more often than membership changed.
func TestShards(t *testing.T) {
	testenv.SkipIfShort(t)
	env, err := testenv.StartAudited(vsShardsAudit, "kcp", "skr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g := gomega.NewWithT(t)
	kcp, skr := env.Cluster("kcp"), env.Cluster("skr")
	for _, ns := range []string{kymaNS, gatewayNS} {
		if err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
	}
	runtimeCA := pki.MustCA(t, "vs-controller shards CA")
	if err := cmcontrollers.InstallCA(ctx, kcp.Client, runtimeCA, kymaNS, issuerName); err != nil {
		t.Fatal(err)
	}
	cmDone := make(chan error, 1)
	go func() {
		cmDone <- cmcontrollers.Run(ctx, cmcontrollers.Options{Kubeconfig: kcp.KubeconfigPath, Log: logr.Discard()})
	}()
	t.Cleanup(func() {
		cancel()
		if err := <-cmDone; err != nil {
			t.Errorf("cert-manager's controllers: %v", err)
		}
	})

	kubeconfig, err := os.ReadFile(skr.KubeconfigPath)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, vsShardsRuntimes)
	for i := range ids {
		id := fmt.Sprintf("runtime-%05d", i)
		ids[i] = id
		if err := kcp.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: skrclient.SecretName(id), Namespace: kymaNS,
			Labels: map[string]string{contract.LabelPartOf: contract.PartOf}},
			Data: map[string][]byte{skrclient.SecretKey: kubeconfig}}); err != nil {
			t.Fatal(err)
		}
		kyma := &unstructured.Unstructured{}
		kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		kyma.SetNamespace(kymaNS)
		kyma.SetName(id)
		kyma.SetLabels(map[string]string{contract.LabelRuntimeID: id})
		kyma.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: id + ".v1.example.com"})
		if err := kcp.Client.Create(ctx, kyma); err != nil {
			t.Fatal(err)
		}
	}
	bin, err := testenv.BuildBinary("vs-controller")
	if err != nil {
		t.Fatal(err)
	}
	logs := t.TempDir()
	replicas := map[string]*exec.Cmd{}
	start := func(id string) {
		t.Helper()
		cmd := exec.Command(bin, "--kubeconfig", kcp.KubeconfigPath, "--leader-elect", "--kyma-namespace", kymaNS, "--gateway-namespace", gatewayNS,
			"--shard-identity", id, "--shard-lease-duration", vsShardsLease.String(),
			"--issuer-name", issuerName, "--kcp-gateway-host", kcpGateway, "--skr-webhook-image", skrImage,
			"--metrics-bind-address", "0", "--health-probe-bind-address", testenv.FreeAddr(), "--health-report-bind-address", "0",
			"--ca-secret", issuerName, "--gateway-ca-secret", "", "--gateway-certificate", "", "--ca-poll-interval", "500ms", "--ca-settle", "0s",
			"--skr-timeout", "3s", "--watcher-debounce", "50ms", "--kubeconfig-retry", "1s")
		out, err := os.Create(filepath.Join(logs, id+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		replicas[id] = cmd
		t.Cleanup(func() {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(out.Name())
				if len(b) > 4000 {
					b = b[len(b)-4000:]
				}
				t.Logf("%s (end):\n%s", out.Name(), b)
			}
		})
	}
	stop := func(id string, sig syscall.Signal) {
		t.Helper()
		if err := replicas[id].Process.Signal(sig); err != nil {
			t.Fatal(err)
		}
		_ = replicas[id].Wait()
		delete(replicas, id)
	}
	// converge waits until every runtime's Certificate asks for domain
	// version v, is issued at its generation and carries the evidence of
	// a completed push.
	converge := func(step, v string) time.Duration {
		t.Helper()
		began := time.Now()
		g.Eventually(func() string {
			behind, first := 0, ""
			for _, id := range ids {
				crt := &certmanagerv1.Certificate{}
				err := kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(id)}, crt)
				ready := false
				for _, c := range crt.Status.Conditions {
					ready = ready || (c.Type == certmanagerv1.CertificateConditionReady && c.Status == "True" && c.ObservedGeneration == crt.Generation)
				}
				_, pushed := trust.EvidenceOf(crt)
				if err != nil || !slices.Contains(crt.Spec.DNSNames, id+"."+v+".example.com") || !ready || !pushed {
					behind++
					if first == "" {
						first = fmt.Sprintf("%s (ready %v, pushed %v, dns %v, %v)", id, ready, pushed, crt.Spec.DNSNames, err)
					}
				}
			}
			if behind == 0 {
				return ""
			}
			return fmt.Sprintf("%d behind, e.g. %s", behind, first)
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(gomega.BeEmpty(), step)
		return time.Since(began)
	}
	// bump changes every Kyma's skr-domain to version v: the owner
	// re-applies its Certificate.
	bump := func(v string) {
		t.Helper()
		for _, id := range ids {
			if err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
				kyma := &unstructured.Unstructured{}
				kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
				if err := kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: id}, kyma); err != nil {
					return err
				}
				a := kyma.GetAnnotations()
				a[contract.AnnotationSKRDomain] = id + "." + v + ".example.com"
				kyma.SetAnnotations(a)
				return kcp.Client.Update(ctx, kyma)
			}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// views waits until every live member publishes the view want and
	// returns how long that took.
	views := func(step string, want ...string) time.Duration {
		t.Helper()
		began := time.Now()
		slices.Sort(want)
		g.Eventually(func() []string {
			leases := &coordinationv1.LeaseList{}
			if err := kcp.Client.List(ctx, leases, client.InNamespace(kymaNS), client.MatchingLabels{shards.LabelGroup: vsmanager.ShardGroup}); err != nil {
				return []string{err.Error()}
			}
			wrong := slices.Clone(want)
			for _, l := range leases.Items {
				h := ""
				if l.Spec.HolderIdentity != nil {
					h = *l.Spec.HolderIdentity
				}
				if !slices.Contains(want, h) {
					continue // released, or gone (its Lease expires)
				}
				if l.Annotations[shards.AnnotationView] == strings.Join(want, ",") {
					wrong = slices.DeleteFunc(wrong, func(s string) bool { return s == h })
				}
			}
			return wrong
		}).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).Should(gomega.BeEmpty(), step)
		return time.Since(began)
	}

	for _, id := range []string{"vs-1-a", "vs-2-a", "vs-3-a"} {
		start(id)
	}
	views("3 replicas started", "vs-1-a", "vs-2-a", "vs-3-a")
	t.Logf("3 replicas: every runtime pushed in %s", converge("3 replicas started", "v1"))
	bump("v2")
	t.Logf("3 replicas, a change: converged in %s", converge("a change with 3 replicas", "v2"))

	owner := shards.Owner(kymaNS+"/"+ids[0], []string{"vs-1-a", "vs-2-a", "vs-3-a"})
	rest := slices.DeleteFunc([]string{"vs-1-a", "vs-2-a", "vs-3-a"}, func(s string) bool { return s == owner })
	began := time.Now()
	stop(owner, syscall.SIGKILL)
	t.Logf("%s (owner of %s) SIGKILLed: the others' view without it after %s (Lease %s)", owner, ids[0], views("after the SIGKILL", rest...), vsShardsLease)
	bump("v3")
	converge("after the SIGKILL of an owner", "v3")
	t.Logf("after the SIGKILL: every runtime's change converged %s after the kill", time.Since(began))

	start("vs-4-a")
	views("after vs-4-a joined", append(slices.Clone(rest), "vs-4-a")...)
	stop(rest[0], syscall.SIGTERM)
	live := []string{rest[1], "vs-4-a"}
	views("after a replica stopped", live...)
	bump("v4")
	t.Logf("after a join and a stop: converged in %s", converge("after a join and a stop", "v4"))
	// Each runtime's Certificate, last written for v4 under this view,
	// names the replica that keeps the runtime.
	for _, id := range ids {
		crt := &certmanagerv1.Certificate{}
		if err := kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(id)}, crt); err != nil {
			t.Fatal(err)
		}
		if got, want := crt.Labels[shards.LabelOwner], shards.Owner(kymaNS+"/"+id, live); got != want {
			t.Errorf("Certificate of %s names %q as its replica, want %q", id, got, want)
		}
	}

	// A pause that lands mid-pass (issue 40 finding 5): the replica whose
	// pass writes a runtime's Certificate for the next domain first is
	// stopped (SIGSTOP) while the KCP's admission holds that write — the
	// pass goes on after it with the SKR bundle and the trust evidence on
	// the Certificate. It stays stopped until the others dropped it from
	// their views and one of them wrote that runtime's Certificate, then
	// runs again (SIGCONT): the audit below fails unless the rest of its
	// pass is refused.
	type pause struct{ victim, runtime string }
	stopped := make(chan pause, 1)
	var armed atomic.Bool
	armed.Store(true)
	hold, unhold := context.WithCancel(ctx)
	claimant := func(runtime string) string {
		leases := &coordinationv1.LeaseList{}
		if err := kcp.Client.List(ctx, leases, client.InNamespace(kymaNS), client.MatchingLabels{shards.LabelGroup: vsmanager.ShardGroup}); err != nil {
			return ""
		}
		for _, l := range leases.Items {
			h := ptr.Deref(l.Spec.HolderIdentity, "")
			if h != "" && slices.Contains(live, h) && shards.Owner(runtime, strings.Split(l.Annotations[shards.AnnotationView], ",")) == h {
				return h
			}
		}
		return ""
	}
	if err := admissionhold.Install(hold, kcp.Client, "pause-mid-pass", admissionregistrationv1.Rule{APIGroups: []string{"cert-manager.io"}, APIVersions: []string{"v1"}, Resources: []string{"certificates"}},
		func(_ context.Context, req *admissionv1.AdmissionRequest) {
			if req.Operation != admissionv1.Update || !armed.Load() || !strings.Contains(string(req.Object.Raw), ".v5.example.com") || strings.Contains(string(req.OldObject.Raw), ".v5.example.com") {
				return // only the owner's pass changes the domain
			}
			id, ok := certificates.RuntimeIDOfSecret(req.Name)
			writer := claimant(kymaNS + "/" + id)
			if !ok || writer == "" || !armed.CompareAndSwap(true, false) {
				return
			}
			if err := replicas[writer].Process.Signal(syscall.SIGSTOP); err != nil {
				t.Error(err)
			}
			stopped <- pause{writer, id}
		}); err != nil {
		t.Fatal(err)
	}
	bump("v5")
	var paused pause
	select {
	case paused = <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatal("no replica wrote a Certificate for the v5 domain within 30 s")
	}
	pauseBegan := time.Now()
	unhold()
	if err := kcp.Client.Delete(ctx, &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: "pause-mid-pass"}}); err != nil {
		t.Fatal(err)
	}
	others := slices.DeleteFunc(slices.Clone(live), func(m string) bool { return m == paused.victim })
	views("while "+paused.victim+" is stopped", others...)
	g.Eventually(func() string {
		crt := &certmanagerv1.Certificate{}
		if err := kcp.Client.Get(ctx, client.ObjectKey{Namespace: kymaNS, Name: certificates.Name(paused.runtime)}, crt); err != nil {
			return err.Error()
		}
		return crt.Labels[shards.LabelOwner]
	}).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(gomega.BeElementOf(others), "another replica writes the Certificate of "+paused.runtime)
	if err := replicas[paused.victim].Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s stopped mid-pass (writing the Certificate of %s) for %s; views with it again after %s", paused.victim, paused.runtime, time.Since(pauseBegan), views("after "+paused.victim+" resumed", live...))
	t.Logf("after the pause: converged in %s", converge("after the pause", "v5"))

	// Membership changes: the second and third replica joining, then kill,
	// add, stop, and the pause (out and back in).
	shardaudit.Check(t, kcp.AuditLogPath, shardaudit.Options{
		Group: vsmanager.ShardGroup, Lease: vsShardsLease, Runtimes: vsShardsRuntimes, MembershipChanges: 7,
		Runtime: func(e *shardaudit.Event) (string, bool) {
			switch e.ObjectRef.Resource {
			case "kymas":
				return kymaNS + "/" + e.ObjectRef.Name, true
			case "certificates":
				id, ok := certificates.RuntimeIDOfSecret(e.ObjectRef.Name)
				return kymaNS + "/" + id, ok
			}
			return "", false
		},
	})
}
