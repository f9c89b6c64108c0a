package localenv

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// Runtime is a further runtime of the local environment, besides
// RuntimeID: its own SKR API server (the SKR's Kubernetes version), Kyma CR
// and kubeconfig Secret in the KCP, the certificate and bundle vs-controller
// gives it, and its own skr-webhook process, which reads its certificate
// from files mirrored from its SKR's Secret (as runtime-1's) and posts
// through the same gateway.
//
// What it does not have: admission of its own. vs-controller has one
// --skr-webhook-url for every runtime (a local aid), so its SKR's webhook
// configuration names runtime-1's webhook process; its own webhook process
// sends resyncs, heartbeats and health reports only. It serves as the
// runtimes that must stay unflagged while a fault breaks another one.
type Runtime struct {
	ID, Domain string
	SKR        *testenv.Cluster
	// MetricsURL is its skr-webhook's /metrics.
	MetricsURL string

	s       *System
	args    []string
	health  string
	mu      sync.Mutex
	webhook *process
	starts  int
}

// AddRuntime starts a further runtime (Runtime) and returns once its
// skr-webhook, started with webhookArgs added, is ready.
func (s *System) AddRuntime(ctx context.Context, id, domain string, webhookArgs ...string) (*Runtime, error) {
	dir := filepath.Join(s.Dir, id)
	name := "skr-" + id
	env, err := testenv.StartInDir(dir, name)
	if err != nil {
		return nil, err
	}
	s.runtimeEnvs = append(s.runtimeEnvs, env)
	rt := &Runtime{ID: id, Domain: domain, SKR: env.Cluster(name), s: s}
	if err := s.createRuntime(ctx, id, domain, rt.SKR.KubeconfigPath); err != nil {
		return nil, err
	}
	certDir := filepath.Join(dir, "skr-webhook-tls")
	skr := rt.SKR.Client
	if err := s.mirrorSecret(ctx, s.runCtx, certDir, func(c context.Context) (*corev1.Secret, error) {
		sec := &corev1.Secret{}
		err := skr.Get(c, client.ObjectKey{Namespace: SKRNamespace, Name: bundle.SecretName}, sec)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return sec, err
	}, fmt.Sprintf("Secret %s/%s in the SKR (vs-controller log: %s)", SKRNamespace, bundle.SecretName, filepath.Join(s.Dir, "logs", "vs-controller.log"))); err != nil {
		return nil, fmt.Errorf("runtime %s: %w", id, err)
	}
	ports, err := s.ports.reserve(3)
	if err != nil {
		return nil, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	rt.health, rt.MetricsURL = addr(1), "http://"+addr(2)+"/metrics"
	rt.args = []string{
		"--listen-addr", addr(0), "--health-probe-bind-address", rt.health, "--metrics-bind-address", addr(2),
		"--tls-cert-file", filepath.Join(certDir, "tls.crt"), "--tls-key-file", filepath.Join(certDir, "tls.key"),
		"--ca-file", filepath.Join(certDir, "ca.crt"), "--kcp-addr", s.GatewayAddr, "--drain-timeout", "2s",
		"--managers-file", s.WebhookManagersFile(),
	}
	rt.args = append(rt.args, webhookArgs...)
	if err := rt.StartWebhook(ctx); err != nil {
		return nil, err
	}
	s.step("runtime %s: SKR API server %s, Kyma %s/%s (skr-domain %s), its skr-webhook reporting to %s", id, rt.SKR.Config.Host, KymaNamespace, id, domain, s.GatewayAddr)
	return rt, nil
}

// StartWebhook starts the runtime's skr-webhook (again) and waits until it
// is ready.
func (rt *Runtime) StartWebhook(ctx context.Context) error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.webhook != nil {
		select {
		case <-rt.webhook.done:
		default:
			return errors.New("skr-webhook is running")
		}
	}
	rt.starts++
	p, err := rt.s.start("skr-webhook-"+rt.ID+"-"+strconv.Itoa(rt.starts), rt.s.webhookBinary, nil, nil, rt.args...)
	if err != nil {
		return err
	}
	rt.webhook = p
	return p.waitReady(ctx, "http://"+rt.health+"/readyz", time.Minute)
}

// StopWebhook stops the runtime's skr-webhook with SIGTERM (a rolling
// update's end of a pod) and waits until it is gone.
func (rt *Runtime) StopWebhook() error {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if rt.webhook == nil {
		return errors.New("no skr-webhook")
	}
	_ = syscall.Kill(-rt.webhook.pid(), syscall.SIGTERM)
	select {
	case <-rt.webhook.done:
		return nil
	case <-time.After(30 * time.Second):
		return errors.New("skr-webhook did not stop within 30s of SIGTERM")
	}
}
