package listener

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/manager"
)

// Replicas (docs/architecture.md §4.8, "Listener side"). An operator runs as a
// Deployment with several replicas and leader election; its controllers,
// which read Events(), run only on the leader. The listener therefore has
// two parts:
//
//   - the HTTP server (the Listener itself): it serves, and is ready, on
//     every replica, so a rolling update never waits for leadership;
//   - the consumer marker (Consumer()): a runnable that runs where the
//     controllers run (the leader) and tells the server a consumer reads
//     Events(). A replica whose consumer is not running answers every event
//     503 with Retry-After at once, so the sender retries and reaches the
//     leader; nothing is put on a channel that nobody reads.
//
// SetupWithManager adds both. Adding only the Listener with mgr.Add (the
// earlier API) keeps the earlier behaviour: the listener is then itself a
// leader-election runnable (serving only on the leader, so a non-leader
// replica is never ready).

// consumerRunnable marks the listener's consumer as running while it runs.
type consumerRunnable struct{ l *Listener }

var _ manager.LeaderElectionRunnable = consumerRunnable{}

// NeedLeaderElection: the consumer runs where the controllers run — on the
// leader unless WithLeaderElection(false).
func (c consumerRunnable) NeedLeaderElection() bool { return c.l.cfg.needLeader }

// Start marks the consumer running until ctx is done.
func (c consumerRunnable) Start(ctx context.Context) error {
	c.l.consumers.Add(1)
	c.l.metrics.consumerRunning.Set(1)
	c.l.log.Info("event consumer running: this replica accepts events")
	<-ctx.Done()
	if c.l.consumers.Add(-1) == 0 {
		c.l.metrics.consumerRunning.Set(0)
	}
	if n := len(c.l.events); n > 0 {
		// Accepted (200) but not consumed: the controllers stopped. The
		// operator's next leader re-reads its objects; say how many.
		c.l.log.Info("event consumer stopped with events still buffered", "buffered", n)
	} else {
		c.l.log.Info("event consumer stopped: this replica answers 503")
	}
	return nil
}

// Consumer returns the runnable that marks this listener's consumer as
// running. Add it to the manager that runs the controllers reading
// Events(); it needs leader election unless WithLeaderElection(false).
// Calling Consumer switches the listener to serving on every replica: call
// it before adding the listener (SetupWithManager does both).
func (l *Listener) Consumer() manager.Runnable {
	l.consumerMode.Store(true)
	return consumerRunnable{l: l}
}

// SetupWithManager adds the listener to mgr the recommended way: the HTTP
// server on every replica, the consumer marker where the controllers run,
// and a readiness check named "listener-<manager>" that passes while the
// server listens (whether or not this replica leads).
func (l *Listener) SetupWithManager(mgr manager.Manager) error {
	if err := mgr.Add(l.Consumer()); err != nil {
		return fmt.Errorf("listener: adding the consumer marker: %w", err)
	}
	if err := mgr.Add(l); err != nil {
		return fmt.Errorf("listener: adding the server: %w", err)
	}
	if err := mgr.AddReadyzCheck("listener-"+l.manager, l.ReadyCheck); err != nil {
		return fmt.Errorf("listener: readiness check: %w", err)
	}
	return nil
}

// ConsumerRunning reports whether this replica hands events to a running
// consumer. Without Consumer() (the earlier API) it is always true.
func (l *Listener) ConsumerRunning() bool {
	return !l.consumerMode.Load() || l.consumers.Load() > 0
}
