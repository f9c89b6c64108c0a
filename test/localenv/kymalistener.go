package localenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// An operator on Kyma's own listener (github.com/kyma-project/runtime-watcher/listener
// v1.4.3, test/tools/kymalistener) as a KCP operator behind the edge, for
// the e2e spec labelled kyma-listener (docs/migrating-from-lifecycle-manager.md,
// "Operators on Kyma's listener"). It is started on demand, not by Start.

// KymaOperatorBinary is the folder BuildBinary builds it from (its own
// module: Kyma's listener stays out of the product's go.mod).
const KymaOperatorBinary = "test/tools/kymalistener"

// KymaOperatorPort is the port of its in-cluster Service (a Watcher's
// serviceInfo.port).
const KymaOperatorPort = 8082

// KymaEvent is one event as the operator on Kyma's listener received it on
// its channel: the unstructured object's content, each value with its Go
// type (test/tools/kymalistener's Line).
type KymaEvent struct {
	Time    time.Time                `json:"time"`
	Content map[string]KymaEventItem `json:"content"`
}

// KymaEventItem is one content value and its Go type (e.g.
// "types.NamespacedName").
type KymaEventItem struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// KymaOperator is a running operator on Kyma's listener.
type KymaOperator struct {
	// Service is the in-cluster Service that leads to it (namespace
	// KymaNamespace, port KymaOperatorPort).
	Service string
	// Events carries every event it received, in order.
	Events <-chan KymaEvent
	serviceOperator
}

// StartKymaOperator builds and starts the operator on Kyma's listener for
// manager, registers it with istiod as the Service service (a
// ServiceEntry, as Start does for the example operator) and returns once
// Kyma's listener accepts connections.
func (s *System) StartKymaOperator(ctx context.Context, manager, service string) (*KymaOperator, error) {
	binary, err := testenv.BuildBinary(KymaOperatorBinary)
	if err != nil {
		return nil, err
	}
	ports, err := s.ports.reserve(2)
	if err != nil {
		return nil, err
	}
	listen, health := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1])
	pr, pw := io.Pipe()
	events := make(chan KymaEvent, 4096)
	go readKymaEvents(pr, events)
	so, err := s.startServiceOperator(ctx, "kyma-listener-"+manager, binary, pw, health, service, KymaOperatorPort, listen,
		"--listen-addr", listen, "--manager", manager, "--health-addr", health, "--print", "--log")
	if err != nil {
		return nil, err
	}
	s.step("operator on Kyma's listener v1.4.3 listening on %s for POST /v2/%s/event (Service %s)", listen, manager, service)
	return &KymaOperator{Service: service, Events: events, serviceOperator: *so}, nil
}

// serviceOperator is an operator process started on demand and the
// ServiceEntry through which istiod routes the Service to it.
type serviceOperator struct {
	sys   *System
	proc  *process
	entry client.Object
}

// startServiceOperator starts binary as name with args, its stdout to
// stdout (closed when it ends), waits until http://health/readyz answers
// and registers listen as the in-cluster Service service on port.
func (s *System) startServiceOperator(ctx context.Context, name, binary string, stdout io.WriteCloser, health, service string, port uint32, listen string, args ...string) (*serviceOperator, error) {
	p, err := s.start(name, binary, stdout, nil, args...)
	if err != nil {
		_ = stdout.Close()
		return nil, err
	}
	op := &serviceOperator{sys: s, proc: p}
	if err := p.waitReady(ctx, "http://"+health+"/readyz", time.Minute); err != nil {
		_ = op.Stop(ctx)
		return nil, err
	}
	se, err := LocalService{Name: service, Namespace: KymaNamespace, Port: port, Protocol: "HTTP", Addr: listen}.serviceEntry()
	if err != nil {
		_ = op.Stop(ctx)
		return nil, err
	}
	if err := s.KCP.Client.Create(ctx, se); err != nil {
		_ = op.Stop(ctx)
		return nil, fmt.Errorf("ServiceEntry %s: %w", service, err)
	}
	op.entry = se
	return op, nil
}

// Stop stops the operator and removes its ServiceEntry.
func (o *serviceOperator) Stop(ctx context.Context) error {
	var errs []error
	if o.entry != nil {
		errs = append(errs, client.IgnoreNotFound(o.sys.KCP.Client.Delete(ctx, o.entry)))
	}
	errs = append(errs, o.proc.stop())
	return errors.Join(errs...)
}

// Log is the path of its log (Kyma's listener logs to it).
func (o *serviceOperator) Log() string { return o.proc.log }

func readKymaEvents(r io.Reader, out chan<- KymaEvent) {
	defer close(out)
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		var ev KymaEvent
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Content == nil {
			continue
		}
		select {
		case out <- ev:
		default: // a consumer that stopped reading must not stall the operator
		}
	}
}

// SyncWebhookManagers copies the managers ConfigMap that vs-controller
// renders into the SKR (bundle.ManagersConfigMap: every usable Watcher's
// manager, "<manager> heartbeats" for those opted in) into the skr-webhook's
// --managers-file, as the kubelet updates a mounted ConfigMap; the webhook
// re-reads it every --cert-poll-interval. Start writes that file once, for
// the sample Watcher; a spec that adds a Watcher syncs it and calls
// RestoreWebhookManagers when done. It returns what the file now holds.
func (s *System) SyncWebhookManagers(ctx context.Context) (string, error) {
	var cm corev1.ConfigMap
	if err := s.SKR.Client.Get(ctx, client.ObjectKey{Namespace: SKRNamespace, Name: bundle.ManagersConfigMapName}, &cm); err != nil {
		return "", err
	}
	managers, ok := cm.Data[bundle.ManagersKey]
	if !ok {
		return "", fmt.Errorf("ConfigMap %s/%s has no key %s", SKRNamespace, bundle.ManagersConfigMapName, bundle.ManagersKey)
	}
	return managers, writeFileAtomic(s.WebhookManagersFile(), []byte(managers))
}

// RestoreWebhookManagers writes the managers file as Start wrote it.
func (s *System) RestoreWebhookManagers() error {
	_, err := s.deliveryFlags(s.opts)
	return err
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
