package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
)

// WithBufferSize sets how many accepted events wait for the consumer
// (default DefaultBufferSize).
func WithBufferSize(n int) Option {
	return func(c *config) error {
		if n < 1 {
			return errors.New("WithBufferSize: must be at least 1")
		}
		c.bufferSize = n
		return nil
	}
}

// WithEnqueueTimeout sets how long a request may wait for room in a full
// buffer before it gets 503 with Retry-After (default DefaultEnqueueTimeout;
// 0 answers at once). It is capped at 5s so a handler never blocks long.
func WithEnqueueTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d < 0 || d > 5*time.Second {
			return errors.New("WithEnqueueTimeout: must be between 0 and 5s")
		}
		c.enqueueTimeout = d
		return nil
	}
}

// WithRetryAfter sets the Retry-After of 503 answers, rounded up to whole
// seconds (default DefaultRetryAfter).
func WithRetryAfter(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("WithRetryAfter: must be positive")
		}
		c.retryAfter = d
		return nil
	}
}

// WithTimeouts sets the HTTP server's read-header, read, write and idle
// timeouts; zero keeps a value's default.
func WithTimeouts(readHeader, read, write, idle time.Duration) Option {
	return func(c *config) error {
		for _, d := range []time.Duration{readHeader, read, write, idle} {
			if d < 0 {
				return errors.New("WithTimeouts: negative timeout")
			}
		}
		if readHeader > 0 {
			c.readHeaderTO = readHeader
		}
		if read > 0 {
			c.readTO = read
		}
		if write > 0 {
			c.writeTO = write
		}
		if idle > 0 {
			c.idleTO = idle
		}
		return nil
	}
}

// WithShutdownTimeout bounds the graceful shutdown after the context of
// Start is done (default DefaultShutdownTimeout).
func WithShutdownTimeout(d time.Duration) Option {
	return func(c *config) error {
		if d <= 0 {
			return errors.New("WithShutdownTimeout: must be positive")
		}
		c.shutdownTO = d
		return nil
	}
}

// WithTLSFiles serves TLS with the PEM certificate and key files, reloaded
// when they change (package filewatch, modelled on controller-runtime's
// certwatcher).
func WithTLSFiles(certFile, keyFile string) Option {
	return func(c *config) error {
		if certFile == "" || keyFile == "" {
			return errors.New("WithTLSFiles: certificate and key files are required")
		}
		c.certFile, c.keyFile = certFile, keyFile
		return nil
	}
}

// WithTLSConfig serves TLS with cfg (it must provide a certificate).
func WithTLSConfig(cfg *tls.Config) Option {
	return func(c *config) error {
		if cfg == nil {
			return errors.New("WithTLSConfig: nil config")
		}
		if len(cfg.Certificates) == 0 && cfg.GetCertificate == nil && cfg.GetConfigForClient == nil {
			return errors.New("WithTLSConfig: config has no certificate")
		}
		c.tlsConfig = cfg
		return nil
	}
}

// WithNetListener serves on ln instead of listening on the address given
// to New. Start closes it.
func WithNetListener(ln net.Listener) Option {
	return func(c *config) error {
		if ln == nil {
			return errors.New("WithNetListener: nil listener")
		}
		c.netListener = ln
		return nil
	}
}

// WithOwner shares the runtimes among the replicas that consume (several
// replicas, each owning some runtimes, e.g. module-sync with shards): an
// event (a heartbeat excepted) of a runtime for which owns says false is
// answered 503 with Retry-After and counted
// (runtime_watcher_listener_not_owner_refused_total), so the sender — or
// the gateway, which retries a 503 on another replica — reaches the
// owner; a 2xx still means handed to the owner's consumer. owns runs
// after the identity check, with the request's context.
func WithOwner(owns func(ctx context.Context, runtimeID string) bool) Option {
	return func(c *config) error { c.owns = owns; return nil }
}

// WithLeaderElection sets whether the consumer of the events runs only on
// the elected leader (default true, like the controllers that read
// Events()). With SetupWithManager it decides where the consumer marker
// runs (the server runs everywhere); with the listener added alone, whether
// the listener serves only on the leader.
func WithLeaderElection(needed bool) Option {
	return func(c *config) error { c.needLeader = needed; return nil }
}

// WithLogger sets the logger (default controller-runtime's log.Log named
// "listener"). Accepted and refused events are logged at V(1).
func WithLogger(log logr.Logger) Option {
	return func(c *config) error { c.log = &log; return nil }
}

// WithRegisterer registers the listener's metrics with reg instead of
// controller-runtime's metrics.Registry; nil does not register them.
func WithRegisterer(reg prometheus.Registerer) Option {
	return func(c *config) error { c.registerer = reg; return nil }
}

// WithLastSeen bounds the last-seen record (LastSeen and the metric
// runtime_watcher_listener_last_seen_timestamp_seconds{runtime_id}): at
// most limit runtimes (default DefaultLastSeenLimit; a new one beyond it
// evicts the one heard from longest ago), each forgotten when not heard
// from for retention (default DefaultLastSeenRetention). Keep retention well
// above the alert's silence threshold: a forgotten runtime leaves the
// metric, and its alert resolves.
func WithLastSeen(limit int, retention time.Duration) Option {
	return func(c *config) error {
		if limit < 1 || retention <= 0 {
			return errors.New("WithLastSeen: limit must be at least 1 and retention positive")
		}
		c.lastSeenLimit, c.lastSeenRetention = limit, retention
		return nil
	}
}
