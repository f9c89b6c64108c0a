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

// Replicas are replicas of one component (module-sync or vs-controller)
// that share the runtimes (--leader-elect --shard-identity,
// docs/operations.md "Scaling") in place of the environment's one process
// of it: System.ShardModuleSync and System.ShardVSController start them,
// Restore puts the one process back.
type Replicas struct {
	s         *System
	component string // also each identity's prefix
	binary    string
	args      []string // the one process's
	lease     time.Duration
	// flags are a replica's own flags beyond its ports and identity.
	flags func(r *Replica) []string
	// changed, when set, follows each replica that joined or left (the
	// Service endpoints of module-sync's listeners).
	changed func(ctx context.Context, live []Replica) error
	// restore starts the one process again.
	restore func(ctx context.Context) error

	mu   sync.Mutex
	next int
	// replicas in the order they were started.
	replicas []*Replica
}

// Replica is one of Replicas.
type Replica struct {
	Identity, MetricsURL string
	// Listen is the replica's listener behind the gateway: module-sync's
	// --listen-addr, vs-controller's --health-report-bind-address.
	Listen string
	p      *process
}

// listeners are the replicas' Listen addresses.
func listeners(rs []Replica) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, r.Listen)
	}
	return out
}

// Replicas are the running replicas.
func (m *Replicas) Replicas() []Replica {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]Replica, 0, len(m.replicas))
	for _, r := range m.replicas {
		out = append(out, *r)
	}
	return out
}

// Add starts one more replica (a new identity, as a new pod has) and
// waits until it is ready.
func (m *Replicas) Add(ctx context.Context) (string, error) {
	m.mu.Lock()
	m.next++
	id := fmt.Sprintf("%s-%d", m.component, m.next)
	m.mu.Unlock()
	health, metrics := testenv.FreeAddr(), testenv.FreeAddr()
	r := &Replica{Identity: id, MetricsURL: "http://" + metrics + "/metrics"}
	// Later flags win: each replica its own ports.
	args := append(slices.Clone(m.args), "--health-probe-bind-address", health, "--metrics-bind-address", metrics,
		"--leader-elect", "--shard-identity", id, "--shard-lease-duration", m.lease.String())
	p, err := m.s.start(id, m.binary, nil, nil, append(args, m.flags(r)...)...)
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
	return id, m.follow(ctx)
}

// Kill SIGKILLs the replica id (its Lease is left to expire); Stop sends
// it SIGTERM (it releases its Lease).
func (m *Replicas) Kill(ctx context.Context, id string) error {
	return m.remove(ctx, id, func(p *process) error {
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return nil
	})
}

// Stop: see Kill.
func (m *Replicas) Stop(ctx context.Context, id string) error {
	return m.remove(ctx, id, func(p *process) error { return p.stop() })
}

func (m *Replicas) remove(ctx context.Context, id string, end func(*process) error) error {
	m.mu.Lock()
	i := slices.IndexFunc(m.replicas, func(r *Replica) bool { return r.Identity == id })
	if i < 0 {
		m.mu.Unlock()
		return fmt.Errorf("no %s replica %s", m.component, id)
	}
	r := m.replicas[i]
	m.replicas = slices.Delete(m.replicas, i, i+1)
	m.mu.Unlock()
	if err := end(r.p); err != nil {
		return err
	}
	return m.follow(ctx)
}

func (m *Replicas) follow(ctx context.Context) error {
	if m.changed == nil {
		return nil
	}
	return m.changed(ctx, m.Replicas())
}

// Restore stops every replica and starts the environment's one process
// again.
func (m *Replicas) Restore(ctx context.Context) error {
	for _, r := range m.Replicas() {
		if err := m.Stop(ctx, r.Identity); err != nil {
			return err
		}
	}
	return m.restore(ctx)
}

// addReplicas adds n replicas to m.
func (m *Replicas) addReplicas(ctx context.Context, n int) (*Replicas, error) {
	for range n {
		if _, err := m.Add(ctx); err != nil {
			return m, err
		}
	}
	return m, nil
}

// ShardVSController stops the environment's vs-controller and starts n
// replicas (identities vs-controller-<k>, Leases of lease), each with its
// own health report listener (--health-report-bind-address), as the
// manifests run them: the gateway's health route (the ServiceEntry
// VSControllerHealthService) has the live replicas' listeners as
// endpoints, and a replica that does not evaluate a runtime answers its
// reports 421 (the webhook tries again at once).
func (s *System) ShardVSController(ctx context.Context, n int, lease time.Duration) (*Replicas, error) {
	s.vsMu.Lock()
	err := s.vs.stop()
	s.vs = nil
	s.vsMu.Unlock()
	if err != nil {
		return nil, err
	}
	m := &Replicas{s: s, component: "vs-controller", binary: s.vsBinary, args: s.vsArgs, lease: lease,
		flags: func(r *Replica) []string {
			r.Listen = testenv.FreeAddr()
			return []string{"--health-report-bind-address", r.Listen}
		},
		changed: func(ctx context.Context, live []Replica) error {
			return s.setEndpoints(ctx, VSControllerHealthService, VSControllerHealthPort, listeners(live))
		},
		restore: func(ctx context.Context) error {
			if err := s.setEndpoints(ctx, VSControllerHealthService, VSControllerHealthPort, []string{s.vsReports}); err != nil {
				return err
			}
			return s.RestartVSController(ctx)
		},
	}
	return m.addReplicas(ctx, n)
}

// ShardModuleSync stops the environment's module-sync and starts n
// replicas (identities module-sync-<k>, Leases of lease), each its own
// listener; the module-sync Service (its ServiceEntry) has the live
// replicas' listeners as endpoints, as a Deployment's Service has its
// ready pods.
func (s *System) ShardModuleSync(ctx context.Context, n int, lease time.Duration) (*Replicas, error) {
	if err := s.moduleSync.stop(); err != nil {
		return nil, err
	}
	s.moduleSync = nil
	m := &Replicas{s: s, component: "module-sync", binary: s.msBinary, args: s.msArgs, lease: lease,
		flags: func(r *Replica) []string {
			r.Listen = testenv.FreeAddr()
			return []string{"--listen-addr", r.Listen}
		},
		changed: func(ctx context.Context, live []Replica) error {
			return s.setEndpoints(ctx, ModuleSyncService, ModuleSyncPort, listeners(live))
		},
		restore: s.restartModuleSync,
	}
	return m.addReplicas(ctx, n)
}
