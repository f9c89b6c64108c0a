package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/delivery"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
)

// config is the parsed command line.
type config struct {
	listenAddr     string
	certFile       string
	keyFile        string
	caFile         string
	kcpAddr        string
	clientCertFile string
	clientKeyFile  string
	metricsAddr    string
	healthAddr     string

	queueSize        int
	workers          int
	maxInFlight      int
	maxRetryAge      time.Duration
	retryBaseDelay   time.Duration
	retryMaxDelay    time.Duration
	requestTimeout   time.Duration
	objectInterval   time.Duration
	drainTimeout     time.Duration
	certPollInterval time.Duration

	managersFile      string
	heartbeatInterval time.Duration
	healthInterval    time.Duration
	maxManagers       int

	minTLSVersion uint16 // --min-tls-version towards the KCP gateway
	otlpEndpoint  string

	startup.Common
}

// parseConfig reads and validates the flags (flags only; no environment
// variables). -h and --help print the usage to stderr and return
// flag.ErrHelp; --version returns at once with c.Version set.
func parseConfig(args []string, stderr io.Writer) (*config, error) {
	c := &config{}
	fs := c.FlagSet("skr-webhook", "Admission webhook in an SKR: answers POST /validate/<manager> at once and delivers WatchEvents to the KCP over mTLS.", stderr)
	fs.StringVar(&c.listenAddr, "listen-addr", ":8443", "HTTPS address of the admission endpoint POST /validate/<manager>")
	fs.StringVar(&c.certFile, "tls-cert-file", "", "serving certificate (PEM), e.g. tls.crt of Secret skr-webhook-tls (required)")
	fs.StringVar(&c.keyFile, "tls-key-file", "", "serving key (PEM) (required)")
	fs.StringVar(&c.caFile, "ca-file", "", "CA that signed the KCP gateway's certificate (PEM) (required)")
	fs.StringVar(&c.kcpAddr, "kcp-addr", "", "KCP gateway host[:port]; events go to https://<kcp-addr>/v2/<manager>/event (required)")
	fs.StringVar(&c.clientCertFile, "client-cert-file", "", "client certificate towards the KCP (default: --tls-cert-file)")
	fs.StringVar(&c.clientKeyFile, "client-key-file", "", "client key towards the KCP (default: --tls-key-file)")
	fs.StringVar(&c.metricsAddr, "metrics-bind-address", ":2112", "plain HTTP address of /metrics")
	fs.StringVar(&c.healthAddr, "health-probe-bind-address", ":8081", "plain HTTP address of /healthz and /readyz")
	fs.Var(fs.Lookup("metrics-bind-address").Value, "metrics-addr", "deprecated: use --metrics-bind-address")
	fs.Var(fs.Lookup("health-probe-bind-address").Value, "health-addr", "deprecated: use --health-probe-bind-address")
	fs.IntVar(&c.queueSize, "queue-size", delivery.DefaultQueueSize, "pending deliveries held; when full the oldest is dropped and an overflow resync requested for its manager")
	fs.IntVar(&c.workers, "workers", delivery.DefaultWorkers, "concurrent deliveries to the KCP")
	fs.IntVar(&c.maxInFlight, "max-reviews-in-flight", 4, "admission reviews read and decoded at once (each up to 7 MiB); beyond it a review is answered allowed unread and its manager gets an overflow resync")
	fs.DurationVar(&c.maxRetryAge, "max-retry-age", delivery.DefaultMaxRetryAge, "stop retrying an event whose newest change is older than this; an expired resync replaces it")
	fs.DurationVar(&c.retryBaseDelay, "retry-base-delay", delivery.DefaultBaseDelay, "first retry delay (doubles per attempt, with jitter)")
	fs.DurationVar(&c.retryMaxDelay, "retry-max-delay", delivery.DefaultMaxDelay, "largest retry delay (a Retry-After is honoured up to this)")
	fs.DurationVar(&c.requestTimeout, "request-timeout", delivery.DefaultAttemptTimeout, "bound of one delivery attempt (connect, TLS handshake, answer)")
	fs.DurationVar(&c.objectInterval, "object-interval", delivery.DefaultObjectInterval, "least time between two deliveries of one object; changes in between coalesce (0: none)")
	fs.DurationVar(&c.drainTimeout, "drain-timeout", 10*time.Second, "on SIGTERM (readiness already failing, admission still answered), how long pending events may still be delivered")
	fs.DurationVar(&c.certPollInterval, "cert-poll-interval", 10*time.Second, "re-read the key pairs, --ca-file and --managers-file this often besides watching their directories")
	fs.StringVar(&c.managersFile, "managers-file", "", "file naming the managers, one per line (# comments allowed), re-read every --cert-poll-interval; each gets a startup resync (managers first seen in a /validate/<manager> path too); a line \"<manager> heartbeats\" also opts it in to heartbeats")
	fs.DurationVar(&c.heartbeatInterval, "heartbeat-interval", 5*time.Minute, "send each manager opted in to heartbeats by the managers file a heartbeat this often (0: off)")
	minTLS := fs.String("min-tls-version", "1.2", "lowest TLS version offered to the KCP gateway: 1.2 or 1.3 (TLS 1.3 only)")
	fs.StringVar(&c.otlpEndpoint, "otlp-traces-endpoint", "", "OTLP/gRPC collector for the send spans (http://host:4317 plaintext, https://… TLS); empty: the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else none (every event still carries a traceparent)")
	fs.DurationVar(&c.healthInterval, "health-interval", DefaultHealthInterval, "send this runtime's health report (alive, and which managers' deliveries fail) to the KCP this often, once per runtime; the KCP flags the runtime after three intervals of silence (0: off)")
	fs.IntVar(&c.maxManagers, "max-managers", delivery.DefaultMaxManagers, "managers known (managers file and admission paths) at most; one beyond gets no resyncs or heartbeats (counted), its events are still delivered")

	if err := c.Parse(fs, args); err != nil || c.Version {
		return c, err
	}
	if errs := c.validate(*minTLS); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}

// validate checks every flag, collecting every problem, and sets what the
// flags imply (the client pair defaults to the serving pair; the TLS
// version).
func (c *config) validate(minTLS string) field.ErrorList {
	var errs field.ErrorList
	switch minTLS {
	case "1.2":
		c.minTLSVersion = tls.VersionTLS12
	case "1.3":
		c.minTLSVersion = tls.VersionTLS13
	default:
		errs = startup.Collect(errs, startup.OneOf("min-tls-version", minTLS, "1.2", "1.3"))
	}
	if err := tracing.ValidateEndpoint(c.otlpEndpoint); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("otlp-traces-endpoint"), c.otlpEndpoint, err.Error()))
	}
	if c.kcpAddr == "" {
		errs = append(errs, field.Required(startup.Flag("kcp-addr"), "the KCP gateway host[:port]"))
	} else if _, err := delivery.ParseKCPAddr(c.kcpAddr); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("kcp-addr"), c.kcpAddr, err.Error()))
	}
	clientDefaulted := c.clientCertFile == "" && c.clientKeyFile == ""
	if clientDefaulted {
		c.clientCertFile, c.clientKeyFile = c.certFile, c.keyFile
	}
	files := []struct{ flag, path string }{{"tls-cert-file", c.certFile}, {"tls-key-file", c.keyFile}, {"ca-file", c.caFile}}
	if !clientDefaulted {
		errs = startup.Collect(errs, startup.Together("client-cert-file", c.clientCertFile, "client-key-file", c.clientKeyFile))
		files = append(files, struct{ flag, path string }{"client-cert-file", c.clientCertFile},
			struct{ flag, path string }{"client-key-file", c.clientKeyFile})
	}
	for _, f := range files {
		if f.path == "" {
			errs = append(errs, field.Required(startup.Flag(f.flag), "a PEM file"))
		} else if err := readable(f.path); err != nil {
			errs = append(errs, field.Invalid(startup.Flag(f.flag), f.path, err.Error()))
		}
	}
	errs = startup.Collect(errs,
		startup.IntRange("queue-size", c.queueSize, 1, 1<<20),
		startup.IntRange("max-reviews-in-flight", c.maxInFlight, 1, 64),
		startup.IntRange("workers", c.workers, 1, 1024),
		startup.Positive("max-retry-age", c.maxRetryAge),
		startup.Positive("retry-base-delay", c.retryBaseDelay),
		startup.Positive("retry-max-delay", c.retryMaxDelay),
		startup.Positive("request-timeout", c.requestTimeout),
		startup.Positive("drain-timeout", c.drainTimeout),
		startup.Positive("cert-poll-interval", c.certPollInterval),
		startup.NotNegative("object-interval", c.objectInterval),
		startup.IntRange("max-managers", c.maxManagers, 1, 65536),
		startup.NotNegative("heartbeat-interval", c.heartbeatInterval),
		startup.NotNegative("health-interval", c.healthInterval),
	)
	if c.managersFile != "" {
		if _, _, err := readManagers(c.managersFile); err != nil {
			errs = append(errs, field.Invalid(startup.Flag("managers-file"), c.managersFile, err.Error()))
		}
	}
	return errs
}

// readable checks that a file exists and can be read.
func readable(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil {
		return err
	} else if st.IsDir() {
		return fmt.Errorf("%s is a directory", path)
	}
	if _, err := f.Read(make([]byte, 1)); err != nil {
		if errors.Is(err, io.EOF) {
			return fmt.Errorf("%s is empty", path)
		}
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

// DefaultHealthInterval is --health-interval's default: with the KCP's
// silence threshold of three intervals a broken path is flagged within two
// minutes (docs/architecture.md §4.12).
const DefaultHealthInterval = 30 * time.Second

// dispatcherConfig maps the flags to the delivery configuration.
func (c *config) dispatcherConfig() delivery.Config {
	interval := c.objectInterval
	if interval == 0 {
		interval = -1 // delivery.Config: negative disables
	}
	return delivery.Config{
		QueueSize:      c.queueSize,
		Workers:        c.workers,
		MaxRetryAge:    c.maxRetryAge,
		BaseDelay:      c.retryBaseDelay,
		MaxDelay:       c.retryMaxDelay,
		AttemptTimeout: c.requestTimeout,
		ObjectInterval: interval,

		HeartbeatInterval: c.heartbeatInterval,
		MaxManagers:       c.maxManagers,
	}
}
