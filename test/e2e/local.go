package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/onsi/gomega"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// localEnvironment runs the system of test/localenv.
type localEnvironment struct {
	sys    *localenv.System
	dir    string
	events chan Event
}

// StartLocal brings up test/localenv in a temporary folder.
func StartLocal(ctx context.Context, log logr.Logger) (Environment, error) {
	dir, err := os.MkdirTemp("", "runtime-watcher-e2e-")
	if err != nil {
		return nil, err
	}
	// The KCP shape of docs/architecture.md §4.8: two operator replicas with
	// leader election; heartbeats every second (when the webhook has them).
	sys, err := localenv.Start(ctx, localenv.Options{Dir: dir, Log: log, OperatorReplicas: 2, HeartbeatInterval: time.Second, LogReviews: true, LogAllChecks: true})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e := &localEnvironment{sys: sys, dir: dir, events: make(chan Event, 4096)}
	go func() {
		for ev := range sys.Events {
			e.events <- Event{Time: ev.Time, RuntimeID: ev.RuntimeID, Namespace: ev.Watched.Namespace, Name: ev.Watched.Name, Kind: ev.GVK.Kind, Resync: ev.Resync}
		}
	}()
	return e, nil
}

func (e *localEnvironment) Names() Names {
	return Names{
		KymaNamespace: localenv.KymaNamespace, RuntimeID: localenv.RuntimeID, SKRDomain: localenv.SKRDomain,
		Manager: localenv.Manager, WatcherName: localenv.WatcherName, SKRNamespace: localenv.SKRNamespace,
		WatchedLabel: localenv.WatchedLabel, GatewayNS: localenv.GatewayNamespace, CASettle: localenv.CASettle,
	}
}
func (e *localEnvironment) LowLimitClass() (string, string, ratelimit.Limit) {
	return ratelimit.DefaultClassLabel, localenv.LowLimitClass, localenv.LowLimit
}
func (e *localEnvironment) KCP() client.Client   { return e.sys.KCP.Client }
func (e *localEnvironment) SKR() client.Client   { return e.sys.SKR.Client }
func (e *localEnvironment) Events() <-chan Event { return e.events }
func (e *localEnvironment) GatewayURL() string   { return "https://" + e.sys.GatewayAddr }
func (e *localEnvironment) HTTPClient(c *tls.Certificate) *http.Client {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := e.sys.GatewayTLS(ctx, c)
	if err != nil {
		// Trust nothing: every request fails, with the reason in the error.
		cfg = &tls.Config{RootCAs: x509.NewCertPool(), MinVersion: tls.VersionTLS12}
	}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
}
func (e *localEnvironment) IssueClientCert(o pki.LeafOptions) (tls.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := e.sys.RuntimeCA(ctx)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := ca.Issue(o)
	if err != nil {
		return tls.Certificate{}, err
	}
	return leaf.TLS()
}
func (e *localEnvironment) WebhookMetrics(ctx context.Context) (string, error) {
	return scrape(ctx, e.sys.WebhookMetricsURL)
}

// scrape reads a /metrics page.
func scrape(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return string(b), err
}
func (e *localEnvironment) SetGatewayUp(ctx context.Context, up bool) error {
	return e.sys.SetGatewayUp(ctx, up)
}

// Stop stops the system and removes its folder, unless E2E_KEEP_DIR is set
// (then the process logs stay in <dir>/logs for a look after a failure).
func (e *localEnvironment) Stop() error {
	err := e.sys.Stop()
	if os.Getenv("E2E_KEEP_DIR") != "" {
		fmt.Fprintf(os.Stderr, "E2E_KEEP_DIR: the local environment's files stay in %s\n", e.dir)
		return err
	}
	_ = os.RemoveAll(e.dir)
	return err
}

// Delivery is the local environment's DeliveryControls.
func (e *localEnvironment) Delivery() DeliveryControls { return localDelivery{e.sys} }

type localDelivery struct{ sys *localenv.System }

func (d localDelivery) SetServiceFault(f func(*http.Request) (int, bool)) error {
	if f == nil {
		return d.sys.SetServiceFault(nil)
	}
	return d.sys.SetServiceFault(f)
}
func (d localDelivery) KillWebhook() error                     { return d.sys.KillWebhook() }
func (d localDelivery) StartWebhook(ctx context.Context) error { return d.sys.StartWebhook(ctx) }
func (d localDelivery) WebhookRSS() (int64, int64, error)      { return d.sys.WebhookRSS() }
func (d localDelivery) WebhookURL() string                     { return "https://" + d.sys.WebhookAddr() }
func (d localDelivery) WebhookClient() *http.Client {
	// The webhook serves the runtime certificate: trust the runtime CA as it
	// is now (the delivery specs do not rotate it).
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := d.sys.RuntimeCA(ctx)
	gomega.Expect(err).NotTo(gomega.HaveOccurred(), "read the runtime CA")
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig:     &tls.Config{RootCAs: ca.Pool(), ServerName: "localhost", MinVersion: tls.VersionTLS12},
		MaxIdleConnsPerHost: 64,
	}}
}
func (d localDelivery) Operators() []OperatorReplica {
	var out []OperatorReplica
	for _, op := range d.sys.Operators() {
		out = append(out, OperatorReplica{HealthURL: "http://" + op.Health, MetricsURL: "http://" + op.Metrics + "/metrics"})
	}
	return out
}
func (d localDelivery) ServiceAnswers() []map[int]int { return d.sys.ServiceAnswers() }

// ModuleSyncEnvironment is what the module-sync specs need beyond
// Environment: the local environment runs module-sync and the example
// module manager (test/localenv); the kind environment does not deploy them.
type ModuleSyncEnvironment interface {
	// ModuleSyncMetricsURL is module-sync's /metrics.
	ModuleSyncMetricsURL() string
	// SetSample creates or changes the demo Module CR in the SKR.
	SetSample(ctx context.Context, greeting string, replicas int64) error
	// KCPAs is a client of the KCP acting as user (impersonation), e.g. a
	// module manager's ServiceAccount.
	KCPAs(user string) (client.Client, error)
}

func (e *localEnvironment) ModuleSyncMetricsURL() string { return e.sys.ModuleSyncMetricsURL }
func (e *localEnvironment) KCPAs(user string) (client.Client, error) {
	cfg := rest.CopyConfig(e.sys.KCP.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	return client.New(cfg, client.Options{Scheme: e.sys.KCP.Client.Scheme()})
}
func (e *localEnvironment) SetSample(ctx context.Context, greeting string, replicas int64) error {
	_, err := e.sys.SetSampleGreeting(ctx, greeting, replicas)
	return err
}

// Takeover is the local environment's TakeoverControls.
func (e *localEnvironment) Takeover() TakeoverControls { return localTakeover{e.sys} }

type localTakeover struct{ sys *localenv.System }

func (t localTakeover) RestartController(ctx context.Context, extra ...string) error {
	return t.sys.RestartVSController(ctx, extra...)
}
func (t localTakeover) RestartControllerAfter(ctx context.Context, whileStopped func(context.Context) error, extra ...string) error {
	return t.sys.RestartVSControllerAfter(ctx, whileStopped, extra...)
}
func (t localTakeover) OurWebhookURL() string {
	return "https://localhost:" + portOf(t.sys.WebhookAddr())
}
func (t localTakeover) OurWebhookLog() string { return t.sys.WebhookLog() }
func (t localTakeover) StartWebhook(ctx context.Context, o WebhookOptions) (ExtraWebhook, error) {
	w, err := t.sys.StartExtraWebhook(ctx, localenv.ExtraWebhookOptions{
		Name: o.Name, CertPEM: o.CertPEM, KeyPEM: o.KeyPEM, GatewayCAPEM: o.GatewayCAPEM, Managers: o.Managers,
	})
	if err != nil {
		return nil, err
	}
	return localWebhook{w}, nil
}

type localWebhook struct{ w *localenv.ExtraWebhook }

func (w localWebhook) URL() string        { return w.w.URL }
func (w localWebhook) MetricsURL() string { return w.w.MetricsURL }
func (w localWebhook) Log() string        { return w.w.Log() }
func (w localWebhook) Stop() error        { return w.w.Stop() }

func portOf(hostport string) string {
	_, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return ""
	}
	return port
}

// Istio is the local environment's IstioControls.
func (e *localEnvironment) Istio() IstioControls { return localIstio{e.sys} }

type localIstio struct{ sys *localenv.System }

func (i localIstio) GatewayHost() string                 { return localenv.GatewayHost }
func (i localIstio) GatewayAdmin() envoy.Admin           { return i.sys.GatewayAdmin() }
func (i localIstio) ExtAuthzLog() string                 { return i.sys.ExtAuthzLog() }
func (i localIstio) SetExtAuthzFrozen(frozen bool) error { return i.sys.SetExtAuthzFrozen(frozen) }
func (i localIstio) SetExtAuthzUp(ctx context.Context, up bool) error {
	return i.sys.SetExtAuthzUp(ctx, up)
}

// StartPinningOperator runs a second example operator with SAN pinning
// (localenv.System.StartPinningOperator).
func (e *localEnvironment) StartPinningOperator(ctx context.Context, manager, service string) (PinningOperator, error) {
	op, err := e.sys.StartPinningOperator(ctx, manager, service)
	if err != nil {
		return nil, err
	}
	p := &localPinningOperator{op: op, events: make(chan Event, 4096)}
	go func() {
		for ev := range op.Events {
			p.events <- Event{Time: ev.Time, RuntimeID: ev.RuntimeID, Namespace: ev.Watched.Namespace, Name: ev.Watched.Name, Kind: ev.GVK.Kind, Resync: ev.Resync}
		}
	}()
	return p, nil
}

type localPinningOperator struct {
	op     *localenv.PinningOperator
	events chan Event
}

func (p *localPinningOperator) Events() <-chan Event           { return p.events }
func (p *localPinningOperator) Log() string                    { return p.op.Log() }
func (p *localPinningOperator) Stop(ctx context.Context) error { return p.op.Stop(ctx) }

// StartKymaOperator runs test/tools/kymalistener in the local environment
// (localenv.System.StartKymaOperator).
func (e *localEnvironment) StartKymaOperator(ctx context.Context, manager, service string) (KymaOperator, error) {
	op, err := e.sys.StartKymaOperator(ctx, manager, service)
	if err != nil {
		return nil, err
	}
	k := &localKymaOperator{op: op, events: make(chan KymaEvent, 4096)}
	go func() {
		for ev := range op.Events {
			items := make(map[string]KymaEventItem, len(ev.Content))
			for key, v := range ev.Content {
				items[key] = KymaEventItem{Type: v.Type, Value: v.Value}
			}
			k.events <- KymaEvent{Time: ev.Time, Content: items}
		}
	}()
	return k, nil
}
func (e *localEnvironment) SyncWebhookManagers(ctx context.Context) (string, error) {
	return e.sys.SyncWebhookManagers(ctx)
}
func (e *localEnvironment) RestoreWebhookManagers() error { return e.sys.RestoreWebhookManagers() }

type localKymaOperator struct {
	op     *localenv.KymaOperator
	events chan KymaEvent
}

func (k *localKymaOperator) Events() <-chan KymaEvent       { return k.events }
func (k *localKymaOperator) Log() string                    { return k.op.Log() }
func (k *localKymaOperator) Stop(ctx context.Context) error { return k.op.Stop(ctx) }

// Health: the controls of the spec labelled "silent".
func (e *localEnvironment) Health() HealthControls { return localHealth{e.sys} }

type localHealth struct{ sys *localenv.System }

func (h localHealth) AddRuntime(ctx context.Context, id, domain string, args ...string) (HealthRuntime, error) {
	rt, err := h.sys.AddRuntime(ctx, id, domain, args...)
	if err != nil {
		return nil, err
	}
	return localRuntime{rt}, nil
}
func (h localHealth) RestartController(ctx context.Context, extra ...string) error {
	return h.sys.RestartVSController(ctx, extra...)
}
func (h localHealth) ControllerMetrics(ctx context.Context) (string, error) {
	return scrape(ctx, h.sys.VSControllerMetricsURL)
}
func (h localHealth) RestartWebhook(ctx context.Context, args ...string) error {
	if err := h.sys.KillWebhook(); err != nil {
		return err
	}
	h.sys.SetWebhookExtraArgs(args...)
	return h.sys.StartWebhook(ctx)
}
func (h localHealth) StopWebhook() error { return h.sys.KillWebhook() }
func (h localHealth) RuntimeCA(ctx context.Context) (*pki.CA, error) {
	return h.sys.RuntimeCA(ctx)
}

type localRuntime struct{ rt *localenv.Runtime }

func (r localRuntime) ID() string         { return r.rt.ID }
func (r localRuntime) SKR() client.Client { return r.rt.SKR.Client }

// ShardsEnvironment can replace module-sync by replicas that share the
// runtimes (--shard-identity); the local environment can.
type ShardsEnvironment interface {
	// ShardModuleSync replaces module-sync by n replicas with Leases of
	// lease (localenv.System.ShardModuleSync); Restore puts it back.
	ShardModuleSync(ctx context.Context, n int, lease time.Duration) (*localenv.Replicas, error)
	// ShardVSController replaces vs-controller by n replicas with Leases
	// of lease (localenv.System.ShardVSController); Restore puts it back.
	ShardVSController(ctx context.Context, n int, lease time.Duration) (*localenv.Replicas, error)
	// SetSampleGreeting edits the demo Module CR and returns when.
	SetSampleGreeting(ctx context.Context, greeting string, replicas int64) (time.Time, error)
	// WatchModuleLoop reports every greeting the ModuleConfig and the
	// synced ConfigMap in the SKR take.
	WatchModuleLoop(ctx context.Context) (<-chan localenv.Observation, error)
}

func (e *localEnvironment) ShardModuleSync(ctx context.Context, n int, lease time.Duration) (*localenv.Replicas, error) {
	return e.sys.ShardModuleSync(ctx, n, lease)
}
func (e *localEnvironment) ShardVSController(ctx context.Context, n int, lease time.Duration) (*localenv.Replicas, error) {
	return e.sys.ShardVSController(ctx, n, lease)
}
func (e *localEnvironment) SetSampleGreeting(ctx context.Context, greeting string, replicas int64) (time.Time, error) {
	return e.sys.SetSampleGreeting(ctx, greeting, replicas)
}
func (e *localEnvironment) WatchModuleLoop(ctx context.Context) (<-chan localenv.Observation, error) {
	return e.sys.WatchModuleLoop(ctx)
}
