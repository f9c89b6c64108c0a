package localenv

import (
	"context"
	"io"
	"path/filepath"
	"strconv"

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
	serviceOperator
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
	so, err := s.startServiceOperator(ctx, "pinning-operator-"+manager, binary, pw, health, service, OperatorPort, listen,
		"--kubeconfig", s.KCP.KubeconfigPath, "--listen-addr", listen, "--manager", manager, "--kyma-namespace", KymaNamespace,
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics, "--print", "json",
		"--identity", "san-pinning", "--identity-key-file", filepath.Join(s.IdentityKeyDir(), "tls.crt"))
	if err != nil {
		return nil, err
	}
	s.step("example operator with SAN pinning listening on %s for POST /v2/%s/event (Service %s)", listen, manager, service)
	return &PinningOperator{Service: service, Events: events, serviceOperator: *so}, nil
}
