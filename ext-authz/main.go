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
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/streamlimit"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/fipsmode"
	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

func main() { startup.Main("ext-authz", parseFlags, run) }

// run serves until ctx is done (graceful stop) or something fails.
func run(ctx context.Context, o *options, log logr.Logger) error {
	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	cfg.UserAgent = "ext-authz"
	if err := checkAPIServer(cfg, o.apiTimeout); err != nil {
		return err
	}

	kymaResource, err := discover(cfg, o.apiTimeout)
	if err != nil {
		return err
	}
	kymas := kymastore.New()

	// Listen on everything first, so a taken port fails at once.
	grpcLis, err := net.Listen("tcp", o.grpcAddr)
	if err != nil {
		return fmt.Errorf("--grpc-addr: %w", err)
	}
	metricsLis, err := net.Listen("tcp", o.metricsAddr)
	if err != nil {
		return fmt.Errorf("--metrics-bind-address: %w", err)
	}
	healthLis, err := net.Listen("tcp", o.healthAddr)
	if err != nil {
		return fmt.Errorf("--health-probe-bind-address: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}), fipsmode.Collector("runtime_watcher_ext_authz_fips140_enabled"))
	if err := registerClientMetrics(reg); err != nil {
		return err
	}
	metrics, err := server.NewMetrics(reg)
	if err != nil {
		return err
	}

	var ready atomic.Bool
	verifier := &pinning.Verifier{Lookup: kymas}
	var caWatcher *cafile.Watcher
	if o.caFile != "" {
		caMetrics, err := cafile.NewMetrics(reg)
		if err != nil {
			return err
		}
		caWatcher = &cafile.Watcher{
			Path: o.caFile, Interval: o.caInterval, Metrics: caMetrics, Log: log.WithName("ca-file"),
			// The swap is one atomic store; Checks read the roots with one
			// atomic load and re-verify chains verified against older roots.
			Apply: func(b *filewatch.CABundle) { verifier.SetRoots(b.Pool) },
		}
		if err := caWatcher.Init(); err != nil {
			return fmt.Errorf("--ca-file %s: %w", o.caFile, err)
		}
	}
	frames, err := framelimit.NewMetrics(reg)
	if err != nil {
		return err
	}
	decisions, err := decisionlog.New(o.decisionLog, log.WithName("decision"), reg)
	if err != nil {
		return err
	}
	authzCfg := server.Config{Log: decisions, DryRun: o.dryRun}
	tp, err := tracing.Setup(ctx, tracing.Options{Endpoint: o.otlpEndpoint, Service: "ext-authz", Getenv: os.Getenv})
	if err != nil {
		return err
	}
	if tp != nil {
		authzCfg.Tracer = tp.Tracer("github.com/seed-c8be168e/runtime-watcher/ext-authz")
		defer func() {
			sctx, scancel := context.WithTimeout(context.Background(), o.shutdownGrace)
			defer scancel()
			_ = tp.Shutdown(sctx) // flushes the spans
		}()
		log.Info("tracing on: Check spans exported over OTLP")
	}
	authz := server.New(verifier, ready.Load, metrics, authzCfg)

	streams, err := streamlimit.New(o.maxStreamsAll, reg)
	if err != nil {
		return err
	}
	grpcServer := grpc.NewServer(append(serverOptions(o), grpc.InTapHandle(streamlimit.WithTimeout(o.checkTimeout, streams.Tap)))...)
	authv3.RegisterAuthorizationServer(grpcServer, authz)
	healthSrv := health.NewServer()
	healthpb.RegisterHealthServer(grpcServer, healthSrv)
	for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName} {
		healthSrv.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	}

	rd := readiness{kymas: kymas, lostAfter: o.kymaLostAfter, now: time.Now}
	if caWatcher != nil {
		rd.bundle = caWatcher.Current
	}
	// Ready: the rule of readiness, and not shutting down (ready is false
	// then; Checks read ready alone: once synced they answer from the
	// cache, also while the API server is away).
	readyErr := func() error {
		if err := rd.check(); err != nil {
			return err
		}
		if !ready.Load() {
			return errors.New("shutting down")
		}
		return nil
	}
	healthMux := http.NewServeMux()
	healthMux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	healthMux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if err := readyErr(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	metricsMux := http.NewServeMux()
	metricsMux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	healthHTTP := &http.Server{Handler: healthMux, ReadHeaderTimeout: 5 * time.Second}
	metricsHTTP := &http.Server{Handler: metricsMux, ReadHeaderTimeout: 5 * time.Second}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errc := make(chan error, 4)
	go func() { errc <- wrap("Kyma reflector", kymas.Run(ctx, cfg, kymaResource, o.kymaNamespace)) }()
	go func() {
		errc <- wrap("gRPC server", grpcServer.Serve(netutil.LimitListener(&framelimit.Listener{Listener: grpcLis, Metrics: frames}, o.maxConns)))
	}()
	go func() { errc <- wrap("health server", healthHTTP.Serve(healthLis)) }()
	go func() { errc <- wrap("metrics server", metricsHTTP.Serve(metricsLis)) }()
	if caWatcher != nil {
		// Not a component that can fail: a bad file keeps the CAs in use.
		go func() { _ = caWatcher.Run(ctx) }()
	}
	go func() {
		select {
		case <-ctx.Done():
			return
		case <-kymas.Synced():
		}
		// The gRPC health status follows readiness's rule, re-evaluated every
		// second; it is set before ready turns true, so that /readyz never
		// says ready while gRPC health still says NOT_SERVING. Shutdown
		// (healthSrv.Shutdown) overrides it.
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		was := errors.New("not serving yet")
		for first := true; ; first = false {
			err := rd.check()
			if (err == nil) != (was == nil) {
				status := healthpb.HealthCheckResponse_SERVING
				if err != nil {
					status = healthpb.HealthCheckResponse_NOT_SERVING
					log.Info("not ready", "reason", err.Error())
				} else if !first {
					log.Info("ready again")
				}
				for _, svc := range []string{"", authv3.Authorization_ServiceDesc.ServiceName} {
					healthSrv.SetServingStatus(svc, status)
				}
			}
			was = err
			if first {
				ready.Store(true)
				log.Info("Kyma cache synced; serving")
			}
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
		}
	}()
	log.Info("ext-authz started", "grpcAddr", grpcLis.Addr().String(), "healthAddr", healthLis.Addr().String(),
		"metricsAddr", metricsLis.Addr().String(), "kymaNamespace", o.kymaNamespace, "caFile", o.caFile, "version", version.Get(),
		"dryRun", o.dryRun.All, "dryRunPaths", o.dryRun.PathPrefixes)

	var runErr error
	select {
	case <-ctx.Done():
		log.Info("shutting down")
	case runErr = <-errc:
	}

	// Graceful stop: report not serving, let in-flight Checks finish.
	ready.Store(false)
	healthSrv.Shutdown()
	done := make(chan struct{})
	go func() { grpcServer.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(o.shutdownGrace):
		grpcServer.Stop()
	}
	sctx, scancel := context.WithTimeout(context.Background(), o.shutdownGrace)
	defer scancel()
	_ = healthHTTP.Shutdown(sctx)
	_ = metricsHTTP.Shutdown(sctx)
	cancel()
	return runErr
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
