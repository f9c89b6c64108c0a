// Package listener gives a KCP operator the events that SKR clusters push
// through Runtime Watcher (docs/architecture.md §4.4, §4.6): an HTTP endpoint
// `POST /v2/<manager>/event` that turns each accepted WatchEvent into a
// controller-runtime event.GenericEvent on a channel ready for
// source.Channel.
//
// A Listener is a manager.Runnable: add it to the operator's manager with
// SetupWithManager (it serves and is ready on every replica; events are
// accepted only where the consumer runs, the leader) and watch its Events()
// channel from a controller:
//
//	l, err := listener.New(":8082", "lifecycle-manager")
//	...
//	_ = l.SetupWithManager(mgr)
//	_ = identity.IndexRuntimeID(ctx, mgr.GetFieldIndexer())
//	_ = ctrl.NewControllerManagedBy(mgr).Named("skr-events").
//		WatchesRawSource(source.Channel(l.Events(), listener.EnqueueKyma(mgr.GetCache(), "kcp-system"))).
//		Complete(reconciler)
//
// Besides changes, the sender posts resync events (IsResync: re-read the
// runtime completely) and heartbeats (never on the channel; they advance
// LastSeen), docs/architecture.md §4.8.
//
// Each event's Object is an *unstructured.Unstructured with the content keys
// of Kyma's listener v2: "watched" (map with "namespace" and "name"),
// "watched-gvk" (map with "group", "version" and "kind") and "runtime-id"
// (string). EventFrom reads them back into a typed Event.
//
// The sender's identity never comes from the body. By default the listener
// runs behind ext-authz and requires the x-watcher-runtime-id header that the
// gateway sets on allow; WithSANPinning verifies the gateway's XFCC header in
// process with the same SAN-pinning code ext-authz uses; WithVerifyFunc plugs
// in any other check.
//
// The HTTP handler never waits unboundedly: when the event buffer is full it
// waits at most the enqueue timeout and then answers 503 with Retry-After, so
// the sender retries.
//
// The package imports only the standard library, k8s.io/apimachinery,
// controller-runtime, the Prometheus client and this repository's contract
// and pinning packages (enforced by a test), so operators can import it
// without pulling in Istio, Envoy or cert-manager.
package listener

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/event"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
)

// Defaults of the options.
const (
	DefaultBufferSize        = 1024
	DefaultEnqueueTimeout    = 100 * time.Millisecond
	DefaultRetryAfter        = time.Second
	DefaultVerifyTimeout     = 2 * time.Second
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultWriteTimeout      = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
	// maxHeaderBytes leaves room for an XFCC header of contract.MaxXFCCBytes.
	maxHeaderBytes = 2 * contract.MaxXFCCBytes
)

// Listener receives WatchEvents over HTTP and delivers them on Events().
// Create it with New; it serves from Start until its context is done.
type Listener struct {
	addr    string
	manager string
	path    string

	cfg        config // as the options left it
	events     chan event.GenericEvent
	retryAfter string // Retry-After header value of cfg.retryAfter
	log        logr.Logger
	metrics    *metrics
	started    atomic.Bool
	serving    atomic.Bool
	boundAddr  atomic.Value // string
	stopped    chan struct{}
	caWatcher  *filewatch.Watcher // WithClientCAFile
	// signatures verifies ext-authz's identity signature, reloaded by
	// keyWatcher (WithIdentityKeyFile); nil: not verified.
	signatures *assertion.Verifier
	keyWatcher *filewatch.Watcher
	stopOnce   sync.Once

	seen         *lastSeen
	consumerMode atomic.Bool  // Consumer() was called: gate on consumers
	consumers    atomic.Int32 // running consumer markers
}

var (
	_ manager.Runnable               = (*Listener)(nil)
	_ manager.LeaderElectionRunnable = (*Listener)(nil)
	_ http.Handler                   = (*Listener)(nil)
)

// Option configures a Listener.
type Option func(*config) error

type config struct {
	auth           authenticator
	bufferSize     int
	enqueueTimeout time.Duration
	retryAfter     time.Duration
	verifyTimeout  time.Duration
	readHeaderTO   time.Duration
	readTO         time.Duration
	writeTO        time.Duration
	idleTO         time.Duration
	shutdownTO     time.Duration
	tlsConfig      *tls.Config
	certFile       string
	keyFile        string
	caFile         string
	// identityKeyFile: WithIdentityKeyFile; noIdentitySignature:
	// WithoutIdentitySignature.
	identityKeyFile     string
	noIdentitySignature bool
	netListener         net.Listener
	needLeader          bool
	owns                func(ctx context.Context, runtimeID string) bool // WithOwner
	log                 *logr.Logger
	registerer          prometheus.Registerer

	tracer trace.Tracer // WithTracerProvider

	lastSeenLimit     int
	lastSeenRetention time.Duration
	now               func() time.Time
}

// New returns a Listener for addr (host:port, as for net.Listen) serving
// POST /v2/<managerName>/event. managerName must be a DNS-1123 label.
func New(addr, managerName string, opts ...Option) (*Listener, error) {
	if !contract.ValidManager(managerName) {
		return nil, fmt.Errorf("listener: manager name %q is not a DNS-1123 label", managerName)
	}
	c := config{
		auth:           headerAuth{},
		bufferSize:     DefaultBufferSize,
		enqueueTimeout: DefaultEnqueueTimeout,
		retryAfter:     DefaultRetryAfter,
		verifyTimeout:  DefaultVerifyTimeout,
		readHeaderTO:   DefaultReadHeaderTimeout,
		readTO:         DefaultReadTimeout,
		writeTO:        DefaultWriteTimeout,
		idleTO:         DefaultIdleTimeout,
		shutdownTO:     DefaultShutdownTimeout,
		needLeader:     true,
		registerer:     ctrlmetrics.Registry,

		lastSeenLimit:     DefaultLastSeenLimit,
		lastSeenRetention: DefaultLastSeenRetention,
		now:               time.Now,
	}
	for _, o := range opts {
		if err := o(&c); err != nil {
			return nil, fmt.Errorf("listener: %w", err)
		}
	}
	if c.netListener == nil && addr == "" {
		return nil, errors.New("listener: empty address")
	}
	if c.tlsConfig != nil && c.certFile != "" {
		return nil, errors.New("listener: WithTLSConfig and WithTLSFiles are exclusive")
	}
	if pa, ok := c.auth.(*pinningAuth); ok {
		pa.timeout = c.verifyTimeout
	}
	var caWatcher *filewatch.Watcher
	if c.caFile != "" {
		pa, ok := c.auth.(*pinningAuth)
		if !ok {
			return nil, errors.New("listener: WithClientCAFile needs WithSANPinning")
		}
		rs, ok := pa.v.(RootsSetter)
		if !ok {
			return nil, errors.New("listener: WithClientCAFile needs a verifier with SetRoots")
		}
		caWatcher = &filewatch.Watcher{Name: "client CA file", Paths: []string{c.caFile}, Log: ctrllog.Log.WithName("listener").WithName("ca-file"),
			Load: func(contents [][]byte) error {
				b, err := filewatch.ParseCABundle(contents[0], time.Now())
				if err != nil {
					return err
				}
				rs.SetRoots(b.Pool)
				return nil
			}}
		if c.log != nil {
			caWatcher.Log = c.log.WithName("ca-file")
		}
		if err := caWatcher.Init(); err != nil {
			return nil, fmt.Errorf("listener: client CA file %s: %w", c.caFile, err)
		}
	}
	if fa, ok := c.auth.(*funcAuth); ok {
		fa.timeout = c.verifyTimeout
	}
	log := ctrllog.Log.WithName("listener")
	if c.log != nil {
		log = *c.log
	}
	var signatures *assertion.Verifier
	var keyWatcher *filewatch.Watcher
	switch {
	case c.identityKeyFile != "" && c.noIdentitySignature:
		return nil, errors.New("listener: WithIdentityKeyFile and WithoutIdentitySignature are exclusive")
	case c.identityKeyFile != "":
		var err error
		if signatures, keyWatcher, err = assertion.VerifierFromFile(c.identityKeyFile, log.WithName("identity-key-file")); err != nil {
			return nil, fmt.Errorf("listener: identity key file: %w", err)
		}
	case !c.noIdentitySignature:
		log.Info("the identity ext-authz asserts is not verified (no WithIdentityKeyFile): a route bound to the gateway could set it; see docs/security.md \"Routes cannot speak for a runtime\"",
			"manager", managerName)
	}
	l := &Listener{
		addr:       addr,
		manager:    managerName,
		path:       contract.EventPath(managerName),
		cfg:        c,
		events:     make(chan event.GenericEvent, c.bufferSize),
		retryAfter: retryAfterValue(c.retryAfter),
		log:        log.WithValues("manager", managerName),
		stopped:    make(chan struct{}),
		caWatcher:  caWatcher,
		signatures: signatures,
		keyWatcher: keyWatcher,
	}
	l.metrics = newMetrics(managerName, l.events)
	if signatures != nil {
		l.metrics.sigVerified.Set(1)
	}
	l.seen = newLastSeen(c.lastSeenLimit, c.lastSeenRetention, c.now, l.metrics.evicted)
	labels := prometheus.Labels{"manager": managerName}
	if err := l.metrics.register(managerName, c.registerer, newLastSeenCollector(l.seen, labels)); err != nil {
		return nil, fmt.Errorf("listener: %w", err)
	}
	return l, nil
}

// Events is the channel of accepted events, for source.Channel. It is never
// closed; consumers stop with their own context.
func (l *Listener) Events() <-chan event.GenericEvent { return l.events }

// Path is the event path this listener serves: /v2/<manager>/event.
func (l *Listener) Path() string { return l.path }

// Addr is the address the listener is bound to once Start has opened its
// socket (useful with port 0), and "" before.
func (l *Listener) Addr() string {
	if a, ok := l.boundAddr.Load().(string); ok {
		return a
	}
	return ""
}

// ReadyCheck is a healthz.Checker: nil while the listener is serving.
// Use it with mgr.AddReadyzCheck("listener", l.ReadyCheck).
func (l *Listener) ReadyCheck(_ *http.Request) error {
	if !l.serving.Load() {
		return errors.New("event listener is not serving")
	}
	return nil
}

// NeedLeaderElection implements manager.LeaderElectionRunnable. Once
// Consumer() was called (SetupWithManager does), it is false: the listener
// serves on every replica and only the consumer marker runs on the leader.
// Otherwise (the listener added alone with mgr.Add, the earlier API) the
// listener itself is the leader's: it serves only on the leader, where the
// controllers consuming its events run (see WithLeaderElection).
func (l *Listener) NeedLeaderElection() bool {
	if l.consumerMode.Load() {
		return false
	}
	return l.cfg.needLeader
}

// Start implements manager.Runnable: it serves until ctx is done, then shuts
// the HTTP server down gracefully (bounded by the shutdown timeout). It
// returns an error when it cannot listen or serving fails. A Listener can be
// started once.
func (l *Listener) Start(ctx context.Context) error {
	if !l.started.CompareAndSwap(false, true) {
		return errors.New("listener: already started")
	}
	srv := &http.Server{
		Handler:           l,
		ReadHeaderTimeout: l.cfg.readHeaderTO,
		ReadTimeout:       l.cfg.readTO,
		WriteTimeout:      l.cfg.writeTO,
		IdleTimeout:       l.cfg.idleTO,
		MaxHeaderBytes:    maxHeaderBytes,
	}
	tlsConfig := l.cfg.tlsConfig
	if l.cfg.certFile != "" {
		kp, err := filewatch.NewKeyPair(l.cfg.certFile, l.cfg.keyFile, 0, l.log.WithName("tls-files"))
		if err != nil {
			return fmt.Errorf("listener: loading TLS certificate: %w", err)
		}
		go func() { _ = kp.Run(ctx) }()
		tlsConfig = &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: kp.GetCertificate}
	}
	if l.caWatcher != nil {
		go func() { _ = l.caWatcher.Run(ctx) }()
	}
	if l.keyWatcher != nil {
		go func() { _ = l.keyWatcher.Run(ctx) }()
	}
	ln := l.cfg.netListener
	if ln == nil {
		var err error
		var lc net.ListenConfig
		if ln, err = lc.Listen(ctx, "tcp", l.addr); err != nil {
			return fmt.Errorf("listener: %w", err)
		}
	}
	l.boundAddr.Store(ln.Addr().String())

	errc := make(chan error, 1)
	if tlsConfig != nil {
		srv.TLSConfig = tlsConfig.Clone()
		if srv.TLSConfig.MinVersion == 0 {
			srv.TLSConfig.MinVersion = tls.VersionTLS12
		}
		go func() { errc <- srv.ServeTLS(ln, "", "") }()
	} else {
		go func() { errc <- srv.Serve(ln) }()
	}
	l.serving.Store(true)
	if !l.consumerMode.Load() {
		l.metrics.consumerRunning.Set(1) // the earlier API: serving is consuming
	}
	l.log.Info("serving SKR events", "consumerGate", l.consumerMode.Load(), "address", ln.Addr().String(), "path", l.path, "tls", tlsConfig != nil, "identity", l.cfg.auth.mode(),
		"identitySignature", l.signatures != nil)

	var err error
	select {
	case err = <-errc:
		l.serving.Store(false)
		if errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
		if err != nil {
			return fmt.Errorf("listener: serving: %w", err)
		}
		return nil
	case <-ctx.Done():
	}
	l.serving.Store(false)
	l.stopOnce.Do(func() { close(l.stopped) })
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), l.cfg.shutdownTO)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("listener: graceful shutdown: %w", err)
	}
	<-errc //nolint:errcheck // http.ErrServerClosed, after Shutdown
	l.log.Info("stopped serving SKR events")
	return nil
}

func retryAfterValue(d time.Duration) string {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	if s < 1 {
		s = 1
	}
	return fmt.Sprint(s)
}
