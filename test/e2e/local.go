package e2e

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"os"
	"time"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
	sys, err := localenv.Start(ctx, localenv.Options{Dir: dir, Log: log})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e := &localEnvironment{sys: sys, dir: dir, events: make(chan Event, 4096)}
	go func() {
		for ev := range sys.Events {
			e.events <- Event{Time: ev.Time, RuntimeID: ev.RuntimeID, Namespace: ev.Watched.Namespace, Name: ev.Watched.Name, Kind: ev.GVK.Kind}
		}
	}()
	return e, nil
}

func (e *localEnvironment) Names() Names {
	return Names{
		KymaNamespace: localenv.KymaNamespace, RuntimeID: localenv.RuntimeID, SKRDomain: localenv.SKRDomain,
		Manager: localenv.Manager, WatcherName: localenv.WatcherName, SKRNamespace: localenv.SKRNamespace,
		WatchedLabel: localenv.WatchedLabel, GatewayNS: localenv.GatewayNamespace,
	}
}
func (e *localEnvironment) KCP() client.Client   { return e.sys.KCP.Client }
func (e *localEnvironment) SKR() client.Client   { return e.sys.SKR.Client }
func (e *localEnvironment) Events() <-chan Event { return e.events }
func (e *localEnvironment) GatewayURL() string   { return "https://" + e.sys.GatewayAddr }
func (e *localEnvironment) HTTPClient(c *tls.Certificate) *http.Client {
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: e.sys.GatewayTLS(c)}}
}
func (e *localEnvironment) IssueClientCert(o pki.LeafOptions) (tls.Certificate, error) {
	leaf, err := e.sys.CA.Issue(o)
	if err != nil {
		return tls.Certificate{}, err
	}
	return leaf.TLS()
}
func (e *localEnvironment) SetGatewayUp(_ context.Context, up bool) error {
	return e.sys.SetGatewayUp(up)
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

// ModuleSyncEnvironment is what the module-sync specs need beyond
// Environment: the local environment runs module-sync and the example
// module manager (test/localenv); the kind environment does not deploy them.
type ModuleSyncEnvironment interface {
	// ModuleSyncMetricsURL is module-sync's /metrics.
	ModuleSyncMetricsURL() string
	// SetSample creates or changes the demo Module CR in the SKR.
	SetSample(ctx context.Context, greeting string, replicas int64) error
}

func (e *localEnvironment) ModuleSyncMetricsURL() string { return e.sys.ModuleSyncMetricsURL }
func (e *localEnvironment) SetSample(ctx context.Context, greeting string, replicas int64) error {
	_, err := e.sys.SetSampleGreeting(ctx, greeting, replicas)
	return err
}
