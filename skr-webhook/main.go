// Command skr-webhook is Runtime Watcher's admission webhook inside an SKR
// (docs/architecture.md §4.3, §4.4). The API server calls it at
// POST /validate/<manager> for the resources each Watcher selects; it
// answers allowed: true at once and delivers the resulting WatchEvents to
// the KCP asynchronously over mTLS (coalescing, retrying, bounded), with a
// startup resync per manager, overflow and expired resyncs where events are
// given up, and heartbeats (§3.8). The serving and client certificates and
// the managers file are reloaded when they change. SIGTERM makes /readyz
// fail at once while admission is still answered, delivers what is pending
// for at most --drain-timeout, then stops; what is left is covered by the
// next pod's startup resync. Its Go soft memory limit is
// GOMEMLIMIT, or else 90 % of the container's cgroup memory limit (package
// memlimit).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/admission"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/delivery"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

func main() { startup.Main("skr-webhook", parseConfig, run) }

// run wires the webhook and serves until ctx ends.
func run(ctx context.Context, cfg *config, log logr.Logger) error {
	a, err := newApp(cfg, log)
	if err != nil {
		return fmt.Errorf("startup: %w", err)
	}
	return a.run(ctx)
}

// app is the wired webhook: certificates, delivery, the three servers.
type app struct {
	cfg          *config
	log          logr.Logger
	servingCerts *filewatch.KeyPair
	clientCerts  *filewatch.KeyPair
	caFile       *filewatch.Watcher // reloads the client on a change of ca.crt alone (a CA rotation)
	managers     *filewatch.Watcher // nil without --managers-file
	client       *delivery.Client
	dispatcher   *delivery.Dispatcher
	reporter     *delivery.HealthReporter // nil with --health-interval 0
	handler      *admission.Handler
	registry     *prometheus.Registry // the webhook's own metrics (/metrics adds controller-runtime's)
	tracer       *sdktrace.TracerProvider

	webhook, metrics, health       *http.Server
	webhookLn, metricsLn, healthLn net.Listener
	ready                          atomic.Bool
}

// newApp loads the certificates (failing with the flag's name when they
// cannot be read), builds the delivery client and binds the listeners.
func newApp(cfg *config, log logr.Logger) (*app, error) {
	a := &app{cfg: cfg, log: log}
	var err error
	// Every file is reloaded by one kind of watcher (filewatch): the key
	// pairs, ca.crt and the managers file.
	if a.servingCerts, err = filewatch.NewKeyPair(cfg.certFile, cfg.keyFile, cfg.certPollInterval, log.WithName("serving-certificate")); err != nil {
		return nil, fmt.Errorf("loading --tls-cert-file %s / --tls-key-file %s: %w", cfg.certFile, cfg.keyFile, err)
	}
	a.clientCerts = a.servingCerts
	if cfg.clientCertFile != cfg.certFile || cfg.clientKeyFile != cfg.keyFile {
		if a.clientCerts, err = filewatch.NewKeyPair(cfg.clientCertFile, cfg.clientKeyFile, cfg.certPollInterval, log.WithName("client-certificate")); err != nil {
			return nil, fmt.Errorf("loading --client-cert-file %s / --client-key-file %s: %w", cfg.clientCertFile, cfg.clientKeyFile, err)
		}
	}
	a.client, err = delivery.NewClient(delivery.ClientConfig{
		CAFile: cfg.caFile, Certs: a.clientCerts, Timeout: cfg.requestTimeout, MaxConns: cfg.workers, MinTLSVersion: cfg.minTLSVersion,
	}, log.WithName("kcp-client"))
	if err != nil {
		return nil, fmt.Errorf("--ca-file %s: %w", cfg.caFile, err)
	}
	a.clientCerts.OnChange(func() {
		if err := a.client.Reload(); err != nil {
			log.Error(err, "client certificate changed but the KCP client could not be rebuilt; keeping the old one")
		}
	})
	a.caFile = &filewatch.Watcher{Name: "CA file", Paths: []string{cfg.caFile}, Interval: cfg.certPollInterval, Log: log.WithName("ca-file"),
		Load: func([][]byte) error { return a.client.Reload() }}
	if err := a.caFile.Init(); err != nil {
		return nil, fmt.Errorf("--ca-file %s: %w", cfg.caFile, err)
	}
	sender, err := delivery.NewHTTPSender(cfg.kcpAddr, a.client.HTTP)
	if err != nil {
		return nil, fmt.Errorf("--kcp-addr: %w", err)
	}
	// Always a provider: every event carries a traceparent, exported or not.
	if a.tracer, err = tracing.Setup(context.Background(), tracing.Options{
		Endpoint: cfg.otlpEndpoint, Service: "skr-webhook", Always: true, Getenv: os.Getenv,
	}); err != nil {
		return nil, err
	}
	sender.WithTracer(a.tracer.Tracer("github.com/seed-c8be168e/runtime-watcher/skr-webhook"))

	reg := prometheus.NewRegistry()
	a.registry = reg
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	reloads := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "runtime_watcher", Subsystem: "skr_webhook", Name: "file_reloads_total",
		Help: "Reads of a changed file (serving-certificate, client-certificate, ca-file, managers-file): ok (the new content is in use) or error (unreadable or unusable; what was in use stays).",
	}, []string{"file", "result"})
	reg.MustRegister(reloads)
	counted := func(w *filewatch.Watcher, file string) {
		reloads.WithLabelValues(file, "ok")
		reloads.WithLabelValues(file, "error")
		w.Report = func(o filewatch.Outcome, _ error) {
			switch o {
			case filewatch.Loaded:
				reloads.WithLabelValues(file, "ok").Inc()
			case filewatch.Failed:
				reloads.WithLabelValues(file, "error").Inc()
			case filewatch.InUseAgain:
			}
		}
	}
	counted(&a.servingCerts.Watcher, "serving-certificate")
	if a.clientCerts != a.servingCerts {
		counted(&a.clientCerts.Watcher, "client-certificate")
	}
	counted(a.caFile, "ca-file")
	dcfg := cfg.dispatcherConfig()
	dcfg.Registerer = reg
	a.dispatcher = delivery.New(dcfg, sender, log.WithName("delivery"))
	if cfg.healthInterval > 0 {
		a.reporter = delivery.NewHealthReporter(delivery.HealthConfig{
			Interval: cfg.healthInterval, AttemptTimeout: cfg.requestTimeout, Registerer: reg,
		}, sender, a.dispatcher, log.WithName("health"))
	}
	if cfg.managersFile != "" {
		// Read before the dispatcher starts, so each manager's startup
		// resync is sent; a bad file is logged, the webhook still starts.
		a.managers = managersWatcher(cfg.managersFile, cfg.certPollInterval, a.dispatcher, log.WithName("managers"))
		counted(a.managers, "managers-file")
		a.managers.Reload()
	}
	a.handler = admission.NewHandler(a.dispatcher, log.WithName("admission"), admission.NewMetrics(reg)).
		LimitInFlight(cfg.maxInFlight, a.dispatcher)

	mux := http.NewServeMux()
	mux.Handle(contract.ValidatePathPrefix, seeManagers(a.dispatcher, a.handler))
	mux.Handle("/", http.NotFoundHandler())
	a.webhook = &http.Server{
		Handler: mux,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: a.servingCerts.GetCertificate,
		},
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          newStdLogger(log.WithName("webhook-server")),
	}
	a.metrics = &http.Server{
		Handler:           promhttp.HandlerFor(prometheus.Gatherers{reg, ctrlmetrics.Registry}, promhttp.HandlerOpts{}),
		ReadHeaderTimeout: 10 * time.Second,
	}
	healthMux := http.NewServeMux()
	healthMux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	healthMux.HandleFunc("/readyz", a.readyz)
	a.health = &http.Server{Handler: healthMux, ReadHeaderTimeout: 10 * time.Second}

	for _, l := range []struct {
		flag, addr string
		ln         *net.Listener
	}{
		{"listen-addr", cfg.listenAddr, &a.webhookLn},
		{"metrics-bind-address", cfg.metricsAddr, &a.metricsLn},
		{"health-probe-bind-address", cfg.healthAddr, &a.healthLn},
	} {
		if *l.ln, err = net.Listen("tcp", l.addr); err != nil {
			a.closeListeners()
			return nil, fmt.Errorf("--%s: %w", l.flag, err)
		}
	}
	return a, nil
}

func (a *app) closeListeners() {
	for _, ln := range []net.Listener{a.webhookLn, a.metricsLn, a.healthLn} {
		if ln != nil {
			_ = ln.Close()
		}
	}
}

// readyz is 200 once both certificates are loaded and the servers run, and
// 503 from the moment shutdown begins (admission is still answered then).
func (a *app) readyz(w http.ResponseWriter, _ *http.Request) {
	if !a.ready.Load() || a.servingCerts.Certificate() == nil || a.clientCerts.Certificate() == nil {
		http.Error(w, "not ready", http.StatusServiceUnavailable)
		return
	}
	_, _ = io.WriteString(w, "ok")
}

// run serves until ctx ends, then shuts down: readiness off, pending events
// delivered while admission is still answered, until --drain-timeout; then
// the admission endpoint stops and the rest is dropped and counted.
func (a *app) run(ctx context.Context) error {
	watchCtx, stopWatching := context.WithCancel(context.Background())
	defer stopWatching()
	var wg sync.WaitGroup
	watchers := []*filewatch.Watcher{&a.servingCerts.Watcher, a.caFile}
	if a.clientCerts != a.servingCerts {
		watchers = append(watchers, &a.clientCerts.Watcher)
	}
	if a.managers != nil {
		watchers = append(watchers, a.managers)
	}
	for _, w := range watchers {
		wg.Add(1)
		go func() { defer wg.Done(); _ = w.Run(watchCtx) }()
	}
	a.dispatcher.Start()
	if a.reporter != nil {
		wg.Add(1)
		go func() { defer wg.Done(); a.reporter.Run(watchCtx) }()
	}
	errc := make(chan error, 3)
	serve := func(name string, f func() error) {
		go func() {
			if err := f(); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- fmt.Errorf("%s server: %w", name, err)
			}
		}()
	}
	serve("webhook", func() error { return a.webhook.ServeTLS(a.webhookLn, "", "") })
	serve("metrics", func() error { return a.metrics.Serve(a.metricsLn) })
	serve("health", func() error { return a.health.Serve(a.healthLn) })
	a.ready.Store(true)
	a.log.Info("serving", "webhook", a.webhookLn.Addr().String(), "metrics", a.metricsLn.Addr().String(),
		"health", a.healthLn.Addr().String(), "kcp", a.cfg.kcpAddr, "version", version.Get())

	var runErr error
	select {
	case <-ctx.Done():
		a.log.Info("shutting down", "drainTimeout", a.cfg.drainTimeout.String())
	case runErr = <-errc:
		a.log.Error(runErr, "server failed, shutting down")
	}
	// Readiness fails first; admission is still answered (and its events
	// taken) while the queue drains, so nothing reaches a closed port while
	// the Service still routes here.
	a.ready.Store(false)
	shutdownCtx, cancel := context.WithTimeout(context.Background(), a.cfg.drainTimeout)
	defer cancel()
	drainErr := a.dispatcher.Drain(shutdownCtx)
	stopCtx, cancelStop := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancelStop()
	if err := a.webhook.Shutdown(stopCtx); err != nil {
		a.log.Error(err, "admission endpoint did not stop in time")
		_ = a.webhook.Close()
	}
	if drainErr == nil {
		// Events taken while the endpoint stopped: a last short flush.
		drainErr = a.dispatcher.Shutdown(shutdownCtx)
	} else {
		_ = a.dispatcher.Shutdown(shutdownCtx) // time is up: drops what is left, counted
	}
	if drainErr != nil {
		a.log.Info("drain time up; undelivered events dropped (the next pod's startup resync covers them)", "error", drainErr.Error())
	} else {
		a.log.Info("all pending events delivered")
	}
	closeCtx, cancelClose := context.WithTimeout(context.Background(), time.Second)
	defer cancelClose()
	_ = a.health.Shutdown(closeCtx)
	_ = a.metrics.Shutdown(closeCtx)
	_ = a.tracer.Shutdown(closeCtx) // flushes the send spans
	stopWatching()
	wg.Wait()
	return runErr
}
