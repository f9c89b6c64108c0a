package localenv

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// What the take-over from Lifecycle Manager (LM) needs of the local
// environment (e2e spec takeover, docs/migrating-from-lifecycle-manager.md):
// vs-controller restarted with other flags (the trust window is a flag),
// a second skr-webhook process standing in for LM's webhook, and the
// kubelet stand-in mounting the Secret our webhook's pods would mount.

// RestartVSController stops vs-controller (when it runs) and starts it
// again with its usual flags and extra, and waits until it is ready.
func (s *System) RestartVSController(ctx context.Context, extra ...string) error {
	return s.RestartVSControllerAfter(ctx, nil, extra...)
}

// RestartVSControllerAfter is RestartVSController that runs whileStopped
// (when not nil) between the stop and the start: what it writes in the KCP
// is what the new process starts from, with no old process to react to it.
func (s *System) RestartVSControllerAfter(ctx context.Context, whileStopped func(context.Context) error, extra ...string) error {
	s.vsMu.Lock()
	defer s.vsMu.Unlock()
	if err := s.vs.stop(); err != nil {
		return err
	}
	if whileStopped != nil {
		if err := whileStopped(ctx); err != nil {
			return err
		}
	}
	name := "vs-controller"
	if s.vsStarts > 0 {
		name += "-" + strconv.Itoa(s.vsStarts) // a fresh log per start
	}
	s.vsStarts++
	p, err := s.start(name, s.vsBinary, nil, nil, append(append([]string{}, s.vsArgs...), extra...)...)
	if err != nil {
		return err
	}
	s.vs = p
	return p.waitReady(ctx, "http://"+s.vsHealth+"/readyz", time.Minute)
}

// ourWebhookSecret is the Secret the pods of our webhook would mount:
// skr-webhook-tls when it is ours (type kubernetes.io/tls; Lifecycle
// Manager's has type Opaque and is not ours to serve), else, during a
// take-over, skr-webhook-takeover-tls; nil when neither is there.
func (s *System) ourWebhookSecret(ctx context.Context) (*corev1.Secret, error) {
	for _, name := range []string{bundle.SecretName, bundle.TakeoverSecretName} {
		var sec corev1.Secret
		err := s.SKR.Client.Get(ctx, client.ObjectKey{Namespace: SKRNamespace, Name: name}, &sec)
		switch {
		case err == nil && sec.Type == corev1.SecretTypeTLS:
			return &sec, nil
		case err != nil && client.IgnoreNotFound(err) != nil:
			return nil, err
		}
	}
	return nil, nil
}

// ExtraWebhook is another skr-webhook process serving the SKR API server,
// with a key pair of the caller's choosing.
type ExtraWebhook struct {
	// URL is the base URL of its admission endpoint (https://localhost:port).
	URL string
	// MetricsURL is its /metrics.
	MetricsURL string
	proc       *process
}

// ExtraWebhookOptions configure StartExtraWebhook.
type ExtraWebhookOptions struct {
	// Name names its log and folder.
	Name string
	// CertPEM, KeyPEM: its serving and client certificate (for
	// "localhost", and the runtime's identity at the gateway).
	CertPEM, KeyPEM []byte
	// GatewayCAPEM verifies the gateway (its --ca-file).
	GatewayCAPEM []byte
	// Managers it serves (its --managers-file).
	Managers []string
}

// StartExtraWebhook starts an skr-webhook that posts to the gateway and
// waits until it is ready; it stops with the system or with Stop.
func (s *System) StartExtraWebhook(ctx context.Context, o ExtraWebhookOptions) (*ExtraWebhook, error) {
	dir := filepath.Join(s.Dir, o.Name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	files := map[string][]byte{"tls.crt": o.CertPEM, "tls.key": o.KeyPEM, "ca.crt": o.GatewayCAPEM, "managers": nil}
	for _, m := range o.Managers {
		files["managers"] = append(files["managers"], m+"\n"...)
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return nil, err
		}
	}
	ports, err := s.ports.reserve(3)
	if err != nil {
		return nil, err
	}
	listen, health, metrics := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2])
	args := []string{
		"--listen-addr", listen, "--health-probe-bind-address", health, "--metrics-bind-address", metrics,
		"--tls-cert-file", filepath.Join(dir, "tls.crt"), "--tls-key-file", filepath.Join(dir, "tls.key"),
		"--ca-file", filepath.Join(dir, "ca.crt"), "--kcp-addr", s.GatewayAddr, "--drain-timeout", "2s",
		"--managers-file", filepath.Join(dir, "managers"),
	}
	if s.opts.LogReviews {
		args = append(args, ReviewLogFlags...)
	}
	p, err := s.start(o.Name, s.webhookBinary, nil, nil, args...)
	if err != nil {
		return nil, err
	}
	w := &ExtraWebhook{URL: "https://localhost:" + strconv.Itoa(ports[0]), MetricsURL: "http://" + metrics + "/metrics", proc: p}
	if err := p.waitReady(ctx, "http://"+health+"/readyz", time.Minute); err != nil {
		_ = p.stop()
		return nil, err
	}
	return w, nil
}

// Log is the path of its log (stdout and stderr).
func (w *ExtraWebhook) Log() string { return w.proc.log }

// Stop stops the process (SIGTERM: it drains what it holds).
func (w *ExtraWebhook) Stop() error {
	if w == nil {
		return errors.New("no webhook")
	}
	return w.proc.stop()
}
