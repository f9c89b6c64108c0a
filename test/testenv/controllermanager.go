package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// ControllerManagerControllers are the kube-controller-manager controllers
// StartControllerManager runs: what cert-manager and Istio rely on in a
// real cluster and a bare API server lacks — the garbage collector (a
// Certificate's CertificateRequests and Secrets are owned by it) and the
// namespace controller (a deleted namespace's objects go).
var ControllerManagerControllers = []string{"garbagecollector", "namespace"}

// controllerManager is a running kube-controller-manager.
type controllerManager struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	log  string
}

// StartControllerManager starts kube-controller-manager (built by `make
// envtest-assets` next to kube-apiserver) against the cluster with
// ControllerManagerControllers, its output in <dir>/<name>-kube-controller-manager.log;
// it returns once it serves /healthz. Env.Stop stops it before the API server.
func (c *Cluster) StartControllerManager() error {
	if c.kcm != nil {
		return errors.New("testenv: kube-controller-manager already started")
	}
	if IsSKR(c.Name) {
		// It is the KCP's version, newer than an SKR's API server: a skew
		// Kubernetes does not support.
		return fmt.Errorf("testenv: kube-controller-manager v%s runs against the KCP, not SKR %q (v%s)", KubernetesVersion, c.Name, SKRKubernetesVersion)
	}
	assets, err := AssetsDir()
	if err != nil {
		return err
	}
	binary := filepath.Join(assets, "kube-controller-manager")
	if _, err := os.Stat(binary); err != nil {
		return fmt.Errorf("kube-controller-manager not found in %s: run `make envtest-assets` to build it from source", assets)
	}
	host, port, err := net.SplitHostPort(FreeAddr())
	if err != nil {
		return err
	}
	logPath := filepath.Join(c.dir, c.Name+"-kube-controller-manager.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return err
	}
	cmd := exec.Command(binary,
		"--kubeconfig", c.KubeconfigPath,
		// Delegated authentication and authorization of its /healthz
		// (always allowed) need an API server to ask: the same one.
		"--authentication-kubeconfig", c.KubeconfigPath, "--authorization-kubeconfig", c.KubeconfigPath,
		"--bind-address", host, "--secure-port", port, "--cert-dir", filepath.Join(c.dir, c.Name+"-kube-controller-manager"),
		"--controllers", strings.Join(ControllerManagerControllers, ","),
		"--leader-elect=false",
		// The API server is local and idle but for the tests: the
		// collector's graph is fresh within a second of a deletion.
		"--kube-api-qps", "100", "--kube-api-burst", "200",
	)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = dyingWithParent()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return fmt.Errorf("start kube-controller-manager: %w", err)
	}
	m := &controllerManager{cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		m.err = cmd.Wait()
		_ = logFile.Close()
		close(m.done)
	}()
	c.kcm = m
	if err := m.waitHealthy("https://" + net.JoinHostPort(host, port) + "/healthz"); err != nil {
		_ = m.stop()
		c.kcm = nil
		return err
	}
	return nil
}

func (m *controllerManager) waitHealthy(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Its serving certificate is self-signed at start: only liveness is asked.
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} //nolint:gosec // a local probe of /healthz
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := hc.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-m.done:
			return fmt.Errorf("kube-controller-manager exited (%v); see %s", m.err, m.log)
		case <-ctx.Done():
			return fmt.Errorf("kube-controller-manager not healthy within a minute; see %s", m.log)
		case <-tick.C:
		}
	}
}

// stop sends SIGTERM and waits up to 10 s, then kills it.
func (m *controllerManager) stop() error {
	if m == nil {
		return nil
	}
	_ = m.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-m.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = m.cmd.Process.Kill()
		<-m.done
		return errors.New("kube-controller-manager did not stop within 10s after SIGTERM; killed")
	}
}
