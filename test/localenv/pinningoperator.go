package localenv

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// A second example operator whose listener pins SANs itself (identity mode
// b: --identity=san-pinning, the x-forwarded-client-cert header) and
// verifies ext-authz's identity signature, for the e2e spec that shows a
// route setting x-forwarded-client-cert refused (docs/security.md, "Routes
// cannot speak for a runtime"). It is started on demand, not by Start.

// PinningOperator is a running example operator in identity mode b.
type PinningOperator struct {
	// Service is the in-cluster Service that leads to it (namespace
	// KymaNamespace, port OperatorPort).
	Service string
	// Events carries every event it received, in order.
	Events <-chan ReceivedEvent
	sys    *System
	proc   *process
	entry  client.Object
}

// StartPinningOperator starts the example operator for manager with SAN
// pinning and the identity key set, registers it with istiod as the Service
// service and returns once it is ready.
func (s *System) StartPinningOperator(ctx context.Context, manager, service string) (*PinningOperator, error) {
	binary, err := testenv.BuildBinary("listener/example")
	if err != nil {
		return nil, err
	}
	ports, err := s.ports.reserve(3)
	if err != nil {
		return nil, err
	}
	listen, health, metrics := "127.0.0.1:"+strconv.Itoa(ports[0]), "127.0.0.1:"+strconv.Itoa(ports[1]), "127.0.0.1:"+strconv.Itoa(ports[2])
	pr, pw := io.Pipe()
	events := make(chan ReceivedEvent, 4096)
	s.goRun(func() error { return readEvents(pr, events) })
	p, err := s.start("pinning-operator-"+manager, binary, pw, nil,
		"--kubeconfig", s.KCP.KubeconfigPath, "--listen-addr", listen, "--manager", manager, "--kyma-namespace", KymaNamespace,
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics, "--print", "json",
		"--identity", "san-pinning", "--identity-key-file", filepath.Join(s.IdentityKeyDir(), "tls.crt"))
	if err != nil {
		_ = pw.Close()
		return nil, err
	}
	op := &PinningOperator{Service: service, Events: events, sys: s, proc: p}
	if err := p.waitReady(ctx, "http://"+health+"/readyz", time.Minute); err != nil {
		_ = op.Stop(ctx)
		return nil, err
	}
	se, err := LocalService{Name: service, Namespace: KymaNamespace, Port: OperatorPort, Protocol: "HTTP", Addr: listen}.serviceEntry()
	if err != nil {
		_ = op.Stop(ctx)
		return nil, err
	}
	if err := s.KCP.Client.Create(ctx, se); err != nil {
		_ = op.Stop(ctx)
		return nil, fmt.Errorf("ServiceEntry %s: %w", service, err)
	}
	op.entry = se
	s.step("example operator with SAN pinning listening on %s for POST /v2/%s/event (Service %s)", listen, manager, service)
	return op, nil
}

// Stop stops the operator and removes its ServiceEntry.
func (o *PinningOperator) Stop(ctx context.Context) error {
	var errs []error
	if o.entry != nil {
		errs = append(errs, client.IgnoreNotFound(o.sys.KCP.Client.Delete(ctx, o.entry)))
	}
	errs = append(errs, o.proc.stop())
	return errors.Join(errs...)
}

// Log is the path of its log.
func (o *PinningOperator) Log() string { return o.proc.log }
