package localenv

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// VSControllerShards are vs-controller replicas that share the runtimes
// (--leader-elect --shard-identity, docs/operations.md "Scaling"), in place
// of the environment's one vs-controller process: ShardVSController starts
// them, Restore puts the one process back. The replicas serve no health
// reports (--health-report-bind-address 0: the gateway's health route has
// one endpoint, the one process's), so the watch-path health evaluation is
// off while they run.
type VSControllerShards struct {
	s     *System
	lease time.Duration
	mu    sync.Mutex
	next  int
	// replicas in the order they were started.
	replicas []*VSControllerReplica
}

// VSControllerReplica is one replica of VSControllerShards.
type VSControllerReplica struct {
	Identity, MetricsURL string
	p                    *process
}

// ShardVSController stops the environment's vs-controller and starts n
// replicas with --leader-elect, --shard-identity vs-controller-<k> and
// lease (--shard-lease-duration).
func (s *System) ShardVSController(ctx context.Context, n int, lease time.Duration) (*VSControllerShards, error) {
	s.vsMu.Lock()
	err := s.vs.stop()
	s.vs = nil
	s.vsMu.Unlock()
	if err != nil {
		return nil, err
	}
	m := &VSControllerShards{s: s, lease: lease}
	for range n {
		if _, err := m.Add(ctx); err != nil {
			return m, err
		}
	}
	return m, nil
}

// Replicas are the running replicas.
func (m *VSControllerShards) Replicas() []VSControllerReplica {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]VSControllerReplica, 0, len(m.replicas))
	for _, r := range m.replicas {
		out = append(out, *r)
	}
	return out
}

// Add starts one more replica (a new identity, as a new pod has) and
// waits until it is ready.
func (m *VSControllerShards) Add(ctx context.Context) (string, error) {
	m.mu.Lock()
	m.next++
	id := fmt.Sprintf("vs-controller-%d", m.next)
	m.mu.Unlock()
	health, metrics := testenv.FreeAddr(), testenv.FreeAddr()
	r := &VSControllerReplica{Identity: id, MetricsURL: "http://" + metrics + "/metrics"}
	// Later flags win: each replica its own ports.
	p, err := m.s.start(id, m.s.vsBinary, nil, nil, append(slices.Clone(m.s.vsArgs),
		"--health-probe-bind-address", health, "--metrics-bind-address", metrics, "--health-report-bind-address", "0",
		"--leader-elect", "--shard-identity", id, "--shard-lease-duration", m.lease.String())...)
	if err != nil {
		return "", err
	}
	r.p = p
	if err := p.waitReady(ctx, "http://"+health+"/readyz", time.Minute); err != nil {
		return "", err
	}
	m.mu.Lock()
	m.replicas = append(m.replicas, r)
	m.mu.Unlock()
	return id, nil
}

// Kill SIGKILLs the replica id (its Lease is left to expire).
func (m *VSControllerShards) Kill(id string) error {
	return m.remove(id, func(p *process) error {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return nil
	})
}

// Stop sends SIGTERM to the replica id (it releases its Lease).
func (m *VSControllerShards) Stop(id string) error {
	return m.remove(id, func(p *process) error { return p.stop() })
}

func (m *VSControllerShards) remove(id string, end func(*process) error) error {
	m.mu.Lock()
	i := slices.IndexFunc(m.replicas, func(r *VSControllerReplica) bool { return r.Identity == id })
	if i < 0 {
		m.mu.Unlock()
		return fmt.Errorf("no vs-controller replica %s", id)
	}
	r := m.replicas[i]
	m.replicas = slices.Delete(m.replicas, i, i+1)
	m.mu.Unlock()
	return end(r.p)
}

// Restore stops every replica and starts the environment's one
// vs-controller again.
func (m *VSControllerShards) Restore(ctx context.Context) error {
	for _, r := range m.Replicas() {
		if err := m.Stop(r.Identity); err != nil {
			return err
		}
	}
	return m.s.RestartVSController(ctx)
}
