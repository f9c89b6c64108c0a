// Command ext-authz is the Envoy ext_authz gRPC service that does SAN pinning
// at the KCP's Istio ingress gateway (docs/architecture.md §4.5, §4.1).
//
// It serves envoy.service.auth.v3.Authorization and grpc.health.v1.Health on
// --grpc-addr, /healthz and /readyz on --health-probe-bind-address and
// /metrics on --metrics-bind-address. Kyma CRs of --kyma-namespace are listed
// and watched as metadata into a small in-memory store (identity/kymastore);
// until the first list arrived, readiness, the gRPC health status and every
// Check answer "unavailable" (Check: HTTP 503, never allow).
//
// It imports identity/pinning and identity/kymastore, not identity or
// controller-runtime's client and cache, so that client-go's typed clients
// are neither linked nor initialized (TestLeanDependencies).
//
// It exits at once with a message on bad flags or when the API server cannot
// be reached within --api-timeout, and stops gracefully on SIGTERM (in-flight
// Checks get --shutdown-grace). Its Go soft memory limit is GOMEMLIMIT, or
// else 90 % of the container's cgroup memory limit (package memlimit).
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/cafile"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/framelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

func main() { startup.Main("ext-authz", parseFlags, run) }

// run serves until ctx is done (graceful stop) or something fails, in
// named steps: connect to the KCP, listen on every address, authorize
// (the Check server and what it rests on), serve (gRPC, health, metrics,
// the Kyma reflector, the CA file), follow readiness, and stop.
func run(ctx context.Context, o *options, log logr.Logger) error {
	kcp, kymaResource, err := connect(o)
	if err != nil {
		return err
	}
	lis, err := listen(o) // a taken port fails at once
	if err != nil {
		return err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), fipsmode.Collector("runtime_watcher_ext_authz_fips140_enabled"))
	if err := registerClientMetrics(reg); err != nil {
		return err
	}
	kymas := kymastore.New()
	if o.rateLimit.mode != ratelimit.ModeOff {
		kymas.ClassLabel = o.rateLimit.classLabel
	}
	a, err := authorize(ctx, o, reg, kymas, log)
	if err != nil {
		return err
	}
	defer a.flushTraces(o.shutdownGrace)
	s, err := newServers(o, reg, a)
	if err != nil {
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	go func() { errc <- wrap("Kyma reflector", kymas.Run(ctx, kcp, kymaResource, o.kymaNamespace)) }()
	s.serve(lis, o.maxConns, errc)
	if a.caFile != nil {
		// Not a component that can fail: a bad file keeps the CAs in use.
		go func() { _ = a.caFile.Run(ctx) }()
	}
	if a.keyFile != nil {
		// Likewise: a bad key file keeps the key in use.
		go func() { _ = a.keyFile.Run(ctx) }()
	}
	if a.limiter != nil {
		go a.limiter.Run(ctx, o.rateLimit.reportInterval, nil, log.WithName("decision"))
	}
	go followReadiness(ctx, kymas, a, s.health, log)
	log.Info("ext-authz started", "grpcAddr", lis.grpc.Addr().String(), "healthAddr", lis.health.Addr().String(),
		"metricsAddr", lis.metrics.Addr().String(), "kymaNamespace", o.kymaNamespace, "caFile", o.caFile, "version", version.Get(),
		"dryRun", o.dryRun.All, "dryRunPaths", o.dryRun.PathPrefixes, "rateLimitMode", o.rateLimit.mode, "rateLimit", o.rateLimit.limit,
		"rateLimitClassLabel", o.rateLimit.classLabel, "rateLimitClasses", o.rateLimit.classes)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
	}
	a.ready.Store(false)
	s.stop(o.shutdownGrace)
	return runErr
}

// connect makes the KCP's client configuration, waits up to --api-timeout
// for its API server and finds the Kyma resource.
func connect(o *options) (*rest.Config, schema.GroupVersionResource, error) {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	cfg.UserAgent = "ext-authz"
	if err := checkAPIServer(cfg, o.apiTimeout); err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	kymaResource, err := discover(cfg, o.apiTimeout)
	if err != nil {
		return nil, schema.GroupVersionResource{}, err
	}
	return cfg, kymaResource, nil
}

// listeners are ext-authz's three addresses, bound before anything runs.
type listeners struct{ grpc, metrics, health net.Listener }

func listen(o *options) (listeners, error) {
	var l listeners
	for _, a := range []struct {
		flag, addr string
		ln         *net.Listener
	}{
		{"grpc-addr", o.grpcAddr, &l.grpc},
		{"metrics-bind-address", o.metricsAddr, &l.metrics},
		{"health-probe-bind-address", o.healthAddr, &l.health},
	} {
		ln, err := net.Listen("tcp", a.addr)
		if err != nil {
			for _, open := range []net.Listener{l.grpc, l.metrics, l.health} {
				if open != nil {
					_ = open.Close()
				}
			}
			return listeners{}, fmt.Errorf("--%s: %w", a.flag, err)
		}
		*a.ln = ln
	}
	return l, nil
}

// authorizer is the Check server and what it rests on: the SAN-pinning
// verifier over the Kyma store, the CA file (optional), readiness.
type authorizer struct {
	server      *server.Server
	ready       atomic.Bool // Checks are answered (not 503) once true
	caFile      *cafile.Watcher
	keyFile     *filewatch.Watcher // --identity-signing-key-file
	limiter     *ratelimit.Limiter // nil: --rate-limit-mode=off
	readiness   readiness
	flushTraces func(grace time.Duration)
}

// authorize builds the Check server: SAN pinning (with --ca-file, also
// the chain, its roots reloaded), the rate limit per runtime, the decision
// log, tracing.
func authorize(ctx context.Context, o *options, reg *prometheus.Registry, kymas *kymastore.Store, log logr.Logger) (*authorizer, error) {
	a := &authorizer{flushTraces: func(time.Duration) {}}
	metrics, err := server.NewMetrics(reg)
	if err != nil {
		return nil, err
	}
	verifier := &pinning.Verifier{Lookup: kymas}
	a.readiness = readiness{kymas: kymas, lostAfter: o.kymaLostAfter, now: time.Now}
	if o.caFile != "" {
		caMetrics, err := cafile.NewMetrics(reg)
		if err != nil {
			return nil, err
		}
		a.caFile = &cafile.Watcher{
			Path: o.caFile, Interval: o.caInterval, Metrics: caMetrics, Log: log.WithName("ca-file"),
			// The swap is one atomic store; Checks read the roots with one
			// atomic load and re-verify chains verified against older roots.
			Apply: func(b *filewatch.CABundle) { verifier.SetRoots(b.Pool) },
		}
		if err := a.caFile.Init(); err != nil {
			return nil, fmt.Errorf("--ca-file %s: %w", o.caFile, err)
		}
		a.readiness.bundle = a.caFile.Current
	}
	decisions, err := decisionlog.New(o.decisionLog, log.WithName("decision"), reg)
	if err != nil {
		return nil, err
	}
	cfg := server.Config{Log: decisions, DryRun: o.dryRun}
	if o.signingKey != "" {
		if cfg.Signer, a.keyFile, err = assertion.SignerFromFile(o.signingKey, o.keyGrace, log.WithName("identity-key")); err != nil {
			return nil, fmt.Errorf("--identity-signing-key-file %s: %w", o.signingKey, err)
		}
	} else {
		log.Info("no --identity-signing-key-file: allows carry no identity signature; listeners and vs-controller that verify it refuse them")
	}
	if o.rateLimit.mode != ratelimit.ModeOff {
		rc := o.rateLimit.config
		rc.Registerer = reg
		if a.limiter, err = ratelimit.New(rc); err != nil {
			return nil, err
		}
		cfg.Limiter = a.limiter
	}
	tp, err := tracing.Setup(ctx, tracing.Options{Endpoint: o.otlpEndpoint, Service: "ext-authz", Getenv: os.Getenv})
	if err != nil {
		return nil, err
	}
	if tp != nil {
		cfg.Tracer = tp.Tracer("github.com/seed-c8be168e/runtime-watcher/ext-authz")
		a.flushTraces = func(grace time.Duration) {
			sctx, cancel := context.WithTimeout(context.Background(), grace)
			defer cancel()
			_ = tp.Shutdown(sctx) // flushes the spans
		}
		log.Info("tracing on: Check spans exported over OTLP")
	}
	a.server = server.New(verifier, a.ready.Load, metrics, cfg)
	return a, nil
}

// readyErr is why ext-authz is not ready: readiness's rule, or shutting
// down (ready is false then; Checks read ready alone: once synced they
// answer from the cache, also while the API server is away).
func (a *authorizer) readyErr() error {
	if err := a.readiness.check(); err != nil {
		return err
	}
	if !a.ready.Load() {
		return errors.New("shutting down")
	}
	return nil
}

// servers are the gRPC server (Checks and gRPC health, bounded) and the
// plain HTTP health and metrics servers.
type servers struct {
	grpc        *grpc.Server
	health      *health.Server
	frames      *framelimit.Metrics
	healthHTTP  *http.Server
	metricsHTTP *http.Server
}

func newServers(o *options, reg *prometheus.Registry, a *authorizer) (*servers, error) {
	s := &servers{}
	var err error
	if s.frames, err = framelimit.NewMetrics(reg); err != nil {
		return nil, err
	}
	streams, err := streamlimit.New(o.maxStreamsAll, reg)
	if err != nil {
		return nil, err
	}
	s.grpc = grpc.NewServer(append(serverOptions(o), grpc.InTapHandle(streamlimit.WithTimeout(o.checkTimeout, streams.Tap)))...)
	authv3.RegisterAuthorizationServer(s.grpc, a.server)
	s.health = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.health)
	for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName} {
		s.health.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}
	healthMux := http.NewServeMux()
	healthMux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	healthMux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := a.readyErr(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	s.healthHTTP = &http.Server{Handler: healthMux, ReadHeaderTimeout: 5 * time.Second}
	s.metricsHTTP = &http.Server{Handler: metricsMux, ReadHeaderTimeout: 5 * time.Second}
	return s, nil
}

// serve runs the three servers on lis; a server that fails reports on errc.
func (s *servers) serve(lis listeners, maxConns int, errc chan<- error) {
	go func() {
		errc <- wrap("gRPC server", s.grpc.Serve(netutil.LimitListener(&framelimit.Listener{Listener: lis.grpc, Metrics: s.frames}, maxConns)))
	}()
	go func() { errc <- wrap("health server", s.healthHTTP.Serve(lis.health)) }()
	go func() { errc <- wrap("metrics server", s.metricsHTTP.Serve(lis.metrics)) }()
}

// stop reports not serving and lets in-flight Checks finish within grace.
func (s *servers) stop(grace time.Duration) {
	s.health.Shutdown()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(grace):
		s.grpc.Stop()
	}
	sctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	_ = s.healthHTTP.Shutdown(sctx)
	_ = s.metricsHTTP.Shutdown(sctx)
}

// followReadiness waits for the Kyma cache to sync, then makes Checks
// answer (a.ready) and keeps the gRPC health status on readiness's rule,
// re-evaluated every second. The status is set before ready turns true, so
// /readyz never says ready while gRPC health still says NOT_SERVING;
// shutdown (health.Shutdown) overrides it.
func followReadiness(ctx context.Context, kymas *kymastore.Store, a *authorizer, hs *health.Server, log logr.Logger) {
	select {
	case <-ctx.Done():
		return
	case <-kymas.Synced():
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	was := errors.New("not serving yet")
	for first := true; ; first = false {
		err := a.readiness.check()
		if (err == nil) != (was == nil) {
			status := healthpb.HealthCheckResponse_SERVING
			if err != nil {
				status = healthpb.HealthCheckResponse_NOT_SERVING
				log.Info("not ready", "reason", err.Error())
			} else if !first {
				log.Info("ready again")
			}
			for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName} {
				hs.SetServingStatus(svc, status)
			}
		}
		was = err
		if first {
			a.ready.Store(true)
			log.Info("Kyma cache synced; serving")
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// MaxCheckBytes bounds one gRPC message (docs/architecture.md §4.10): a
// CheckRequest with the XFCC header and the route is a few KiB; gRPC refuses
// a larger message from its length prefix, before reading or decoding it.
const MaxCheckBytes = 256 << 10

// DefaultStreamWorkers is --stream-workers' default: grpc-go's stream
// workers (NumStreamWorkers) answer Checks on goroutines that live for
// 65,536 streams each, so a Check runs on a stack already grown to what
// decoding a CheckRequest and deciding need. With a new goroutine per
// stream (grpc-go's default) every Check grows an 8 KiB stack by copying
// it (runtime.morestack: about a tenth of ext-authz's CPU under load,
// docs/performance.md). 64 covers a gateway's usual concurrent Checks;
// an idle worker costs its stack.
const DefaultStreamWorkers = 64

// serverOptions bound what one caller can make ext-authz hold: message size,
// streams per connection, stream workers (DefaultStreamWorkers), flow-control windows (fixed: no BDP growth), and
// keepalive (idle and ageing connections closed, pings more often than every
// 10 s without a stream answered with GOAWAY). The windows do not bound
// memory: grpc-go widens a stream's window to the whole announced message
// and replenishes the connection's on receipt. The total is bounded by
// --max-total-streams (package streamlimit, the InTapHandle run adds), the
// time a stream may take by --check-timeout (streamlimit.WithTimeout), the
// memory DATA frames may waste by package framelimit (the listener run wraps).
func serverOptions(o *options) []grpc.ServerOption {
	return []grpc.ServerOption{
		grpc.MaxRecvMsgSize(MaxCheckBytes),
		grpc.MaxSendMsgSize(MaxCheckBytes),
		grpc.MaxConcurrentStreams(uint32(min(o.maxStreams, 4096))),
		grpc.NumStreamWorkers(uint32(max(o.streamWorkers, 0))),
		grpc.InitialWindowSize(64 << 10),
		grpc.InitialConnWindowSize(1 << 20),
		grpc.MaxHeaderListSize(64 << 10),
		grpc.ConnectionTimeout(10 * time.Second),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: false}),
		grpc.KeepaliveParams(keepalive.ServerParameters{
			MaxConnectionIdle:     5 * time.Minute,
			MaxConnectionAge:      30 * time.Minute,
			MaxConnectionAgeGrace: 30 * time.Second,
			Time:                  2 * time.Minute,
			Timeout:               20 * time.Second,
		}),
	}
}

// wrap labels an error of a component that stopped; a component that stops
// without an error (only on shutdown) is an error too, so run always returns.
func wrap(what string, err error) error {
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, grpc.ErrServerStopped) {
		return fmt.Errorf("%s stopped", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and no in-cluster configuration: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// checkAPIServer fails when the API server does not answer /version in time.
func checkAPIServer(cfg *rest.Config, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if _, err := kymastore.ServerVersion(ctx, cfg); err != nil {
		return fmt.Errorf("API server %s not reachable within %s: %w", cfg.Host, timeout, err)
	}
	return nil
}

// discover asks the API server how Kyma CRs are served (an error when the
// Kyma CRD is missing).
func discover(cfg *rest.Config, timeout time.Duration) (schema.GroupVersionResource, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return kymastore.KymaResource(ctx, cfg)
}
