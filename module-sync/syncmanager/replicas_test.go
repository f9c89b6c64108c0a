package syncmanager

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/onsi/gomega"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// TestReplicasAreAllReady runs module-sync as a 2-replica Deployment does:
// two module-sync processes with --leader-elect against one real API
// server. Both must become ready (a readiness that waits for leadership
// stalls every rolling update, and with the PodDisruptionBudget blocks node
// drains); exactly one consumes events, the other answers 503 with
// Retry-After at once so the gateway's retry reaches the leader
// (docs/architecture.md §4.8).
func TestReplicasAreAllReady(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real API server")
	}
	env, err := testenv.Start("kcp")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	cfg := env.Cluster("kcp").Config
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kcp-system"}}); err != nil {
		t.Fatal(err)
	}

	bin, err := testenv.BuildBinary("module-sync")
	if err != nil {
		t.Fatal(err)
	}
	type replica struct{ health, events string }
	var replicas []replica
	done := make(chan error, 2)
	for i := range 2 {
		r := replica{health: testenv.FreeAddr(), events: testenv.FreeAddr()}
		cmd := exec.CommandContext(ctx, bin,
			"--kubeconfig", env.Cluster("kcp").KubeconfigPath,
			"--leader-elect", "--kyma-namespace", "kcp-system",
			"--metrics-bind-address", "0", "--health-probe-bind-address", r.health, "--listen-addr", r.events,
			"--module-resources", "sample=sample.kyma-project.io/v1alpha1/samples")
		out, err := os.Create(filepath.Join(t.TempDir(), fmt.Sprintf("module-sync-%d.log", i)))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if t.Failed() {
				b, _ := os.ReadFile(out.Name())
				t.Logf("%s:\n%s", out.Name(), b)
			}
		})
		replicas = append(replicas, r)
		go func() { done <- cmd.Wait() }()
	}

	hc := &http.Client{Timeout: 2 * time.Second}
	status := func(method, url string) (int, string) {
		req, err := http.NewRequest(method, url, strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, ""
		}
		resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Retry-After")
	}
	// Both ready; one leads (its listener takes the event: anything but
	// 503), the other answers 503 with Retry-After.
	g := gomega.NewWithT(t)
	g.Eventually(func() string {
		select {
		case err := <-done:
			t.Fatalf("a module-sync process ended: %v", err)
		default:
		}
		ready, unavailable, consuming := 0, 0, 0
		for _, r := range replicas {
			if code, _ := status(http.MethodGet, "http://"+r.health+"/readyz"); code == http.StatusOK {
				ready++
			}
			switch code, retry := status(http.MethodPost, "http://"+r.events+"/v2/module-sync/event"); {
			case code == http.StatusServiceUnavailable && retry != "":
				unavailable++
			case code != 0 && code != http.StatusServiceUnavailable:
				consuming++
			}
		}
		return fmt.Sprintf("ready %d, answering 503 with Retry-After %d, consuming %d", ready, unavailable, consuming)
	}).WithTimeout(90 * time.Second).WithPolling(200 * time.Millisecond).
		Should(gomega.Equal("ready 2, answering 503 with Retry-After 1, consuming 1"))
}
