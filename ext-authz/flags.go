package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/cafile"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/decisionlog"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/server"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/tracing"
)

// options are ext-authz's flags (flags only; no environment variables).
type options struct {
	grpcAddr      string
	kubeconfig    string
	kymaNamespace string
	metricsAddr   string
	healthAddr    string
	caFile        string
	caInterval    time.Duration
	apiTimeout    time.Duration
	shutdownGrace time.Duration
	maxStreams    uint
	maxConns      int
	maxStreamsAll int
	streamWorkers int
	checkTimeout  time.Duration
	startup.Common
	kymaLostAfter time.Duration
	decisionLog   decisionlog.Options
	dryRun        server.DryRun
	otlpEndpoint  string
	signingKey    string
	keyGrace      time.Duration
	rateLimit     rateLimitOptions
}

// rateLimitOptions are the --rate-limit-* flags (package ratelimit).
type rateLimitOptions struct {
	mode           string
	limit          string // "<rate>/<burst>"
	classLabel     string
	classes        string // "<class>=<rate>/<burst>,..."
	maxRuntimes    int
	reportInterval time.Duration

	config ratelimit.Config // what validate read from the flags
}

// parseFlags parses and validates args (without the program name). -h and
// --help print the usage to errOut and return flag.ErrHelp.
func parseFlags(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	fs := o.FlagSet("ext-authz", "Envoy ext_authz gRPC service: SAN pinning of SKR client certificates against the Kyma CRs.", errOut)
	fs.StringVar(&o.grpcAddr, "grpc-addr", ":9001", "address of the gRPC server (envoy.service.auth.v3.Authorization and grpc.health.v1.Health)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file of the KCP cluster; in-cluster configuration when empty")
	fs.StringVar(&o.kymaNamespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of the plain HTTP /metrics endpoint")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of the plain HTTP /healthz and /readyz endpoints")
	fs.Var(fs.Lookup("metrics-bind-address").Value, "metrics-addr", "deprecated: use --metrics-bind-address")
	fs.Var(fs.Lookup("health-probe-bind-address").Value, "health-addr", "deprecated: use --health-probe-bind-address")
	fs.StringVar(&o.caFile, "ca-file", "", "optional PEM bundle of the CAs client certificates must chain to (defence in depth; the gateway verifies first); reloaded when it changes")
	fs.DurationVar(&o.caInterval, "ca-reload-interval", cafile.DefaultInterval, "how often --ca-file is re-read besides its directory's file events")
	fs.DurationVar(&o.apiTimeout, "api-timeout", 10*time.Second, "how long to wait for the API server at start-up before failing")
	fs.DurationVar(&o.shutdownGrace, "shutdown-grace", 10*time.Second, "how long in-flight Checks may take on SIGTERM")
	fs.UintVar(&o.maxStreams, "max-concurrent-streams", 128, "concurrent Checks per gRPC connection (HTTP/2 streams); each holds at most one 256 KiB message")
	fs.IntVar(&o.maxConns, "max-connections", 64, "open gRPC connections at most; further ones wait in the kernel's accept queue")
	fs.IntVar(&o.maxStreamsAll, "max-total-streams", 256, "concurrent gRPC streams over all connections; more are refused with RESOURCE_EXHAUSTED. Each can pin 320 KiB of an unfinished message: 256 streams, 80 MiB")
	fs.IntVar(&o.streamWorkers, "stream-workers", DefaultStreamWorkers, "goroutines kept to answer Checks, so that their stacks stay grown (a new goroutine per Check grows its stack on every Check); a Check arriving while all are busy gets a goroutine of its own; 0: a goroutine per Check")
	fs.DurationVar(&o.checkTimeout, "check-timeout", 2*time.Second, "longest a gRPC stream (but a health Watch) may take from its headers to its end; a Check whose client stalls or dribbles its message ends with DEADLINE_EXCEEDED (Envoy waits 200ms by default)")
	fs.DurationVar(&o.kymaLostAfter, "kyma-lost-after", DefaultKymaLostAfter, "not ready (/readyz, gRPC health) while listing and watching the Kyma CRs has failed for longer than this; Checks keep answering from the cache")
	fs.Float64Var(&o.decisionLog.AllowSampleRate, "decision-log-allow-sample-rate", decisionlog.DefaultAllowSampleRate, "fraction of allowed Checks written to the decision log, 0 to 1 (every refusal is written)")
	fs.IntVar(&o.decisionLog.MaxLinesPerSecond, "decision-log-max-lines-per-second", decisionlog.DefaultMaxLinesPerSec, "decision log lines per second at most (refusals and sampled allows; more are dropped and counted); 0 turns the decision log off")
	fs.BoolVar(&o.dryRun.All, "dry-run", false, "decide, log and count every Check with mode=dry-run but allow it (roll-out of SAN pinning; never in production for long)")
	dryRunPaths := fs.String("dry-run-paths", "", "comma-separated request path prefixes (whole segments, e.g. /v2/lifecycle-manager) whose Checks run in dry-run")
	fs.StringVar(&o.rateLimit.mode, "rate-limit-mode", ratelimit.ModeEnforce, "per-runtime rate limit after SAN pinning: enforce (over the limit: HTTP 429 with Retry-After), shadow (over the limit: allowed, counted and named in the decision log) or off")
	fs.StringVar(&o.rateLimit.limit, "rate-limit", ratelimit.Limit{Rate: ratelimit.DefaultRate, Burst: ratelimit.DefaultBurst}.String(), "fair share of a runtime whose class has no limit of its own: <requests per second>/<burst>")
	fs.StringVar(&o.rateLimit.classLabel, "rate-limit-class-label", ratelimit.DefaultClassLabel, "label of the Kyma CR whose value is the runtime's class for --rate-limit-classes; empty: no classes")
	fs.StringVar(&o.rateLimit.classes, "rate-limit-classes", "", "comma-separated <class>=<requests per second>/<burst>, limits of the runtimes whose Kyma carries --rate-limit-class-label=<class>, e.g. trial=10/200")
	fs.IntVar(&o.rateLimit.maxRuntimes, "rate-limit-max-runtimes", ratelimit.DefaultMaxRuntimes, "buckets kept at most (about 80 bytes each); idle runtimes have none; beyond it a bucket is evicted (counted) and its runtime starts again with a full burst")
	fs.DurationVar(&o.rateLimit.reportInterval, "rate-limit-report-interval", ratelimit.DefaultReportInterval, "how often the decision log names the runtimes most often over their limit (at most 10) and idle buckets are removed")
	fs.StringVar(&o.otlpEndpoint, "otlp-traces-endpoint", "", "OTLP/gRPC collector for Check spans (http://host:4317 plaintext, https://… TLS); empty: the standard OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT, else no tracing")

	fs.StringVar(&o.signingKey, "identity-signing-key-file", "", "PEM Ed25519 private key (PKCS#8, cert-manager's tls.key) that signs the identity of every allow (header "+contract.HeaderIdentitySignature+", verified by the listeners and vs-controller's health port: docs/security.md \"Routes cannot speak for a runtime\"); reloaded when it changes; empty: no signature")
	fs.DurationVar(&o.keyGrace, "identity-key-grace", assertion.DefaultGrace, "after --identity-signing-key-file changed, the old key signs this long more, so every verifier holds the new public key first (above kubelet's Secret volume delay)")
	if err := o.Parse(fs, args); err != nil || o.Version {
		return o, err
	}
	if errs := o.validate(fs, *dryRunPaths); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return o, nil
}

// validate checks every flag, collecting every problem, and sets what
// the flags imply (the stream workers' default, the dry-run paths).
func (o *options) validate(fs *flag.FlagSet, dryRunPaths string) field.ErrorList {
	var errs field.ErrorList
	for _, a := range []struct{ flag, addr string }{{"grpc-addr", o.grpcAddr}, {"metrics-bind-address", o.metricsAddr}, {"health-probe-bind-address", o.healthAddr}} {
		if err := validAddr(a.addr); err != nil {
			errs = append(errs, field.Invalid(startup.Flag(a.flag), a.addr, err.Error()))
		}
	}
	seen := map[string]bool{}
	for _, a := range []string{o.grpcAddr, o.metricsAddr, o.healthAddr} {
		if seen[a] && !strings.HasSuffix(a, ":0") {
			errs = append(errs, field.Invalid(startup.Flag("grpc-addr"), a,
				fmt.Sprintf("--grpc-addr, --metrics-bind-address and --health-probe-bind-address must differ (%s, %s, %s)", o.grpcAddr, o.metricsAddr, o.healthAddr)))
			break
		}
		seen[a] = true
	}
	errs = startup.Collect(errs,
		startup.DNSLabel("kyma-namespace", o.kymaNamespace),
		startup.Positive("api-timeout", o.apiTimeout),
		startup.Positive("shutdown-grace", o.shutdownGrace),
		startup.DurationRange("check-timeout", o.checkTimeout, 10*time.Millisecond, 5*time.Minute),
		startup.DurationRange("kyma-lost-after", o.kymaLostAfter, time.Nanosecond, time.Hour),
		startup.DurationRange("ca-reload-interval", o.caInterval, time.Nanosecond, time.Hour),
		startup.DurationRange("identity-key-grace", o.keyGrace, time.Nanosecond, time.Hour),
		startup.IntRange("max-concurrent-streams", int(min(o.maxStreams, 1<<20)), 1, 4096),
		startup.IntRange("max-connections", o.maxConns, 1, 4096),
		startup.IntRange("max-total-streams", o.maxStreamsAll, 1, 4096),
	)
	workersSet := false
	fs.Visit(func(f *flag.Flag) { workersSet = workersSet || f.Name == "stream-workers" })
	if !workersSet {
		o.streamWorkers = min(o.streamWorkers, o.maxStreamsAll) // the default never conflicts with a smaller --max-total-streams
	}
	if o.streamWorkers < 0 || o.streamWorkers > o.maxStreamsAll {
		errs = append(errs, field.Invalid(startup.Flag("stream-workers"), o.streamWorkers, fmt.Sprintf("must be from 0 to --max-total-streams (%d)", o.maxStreamsAll)))
	}
	if err := o.decisionLog.Validate(); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("decision-log-*"), "", err.Error()))
	}
	if dryRunPaths != "" {
		for _, p := range strings.Split(dryRunPaths, ",") {
			if p = strings.TrimSpace(p); !strings.HasPrefix(p, "/") || strings.ContainsAny(p, "?#") {
				errs = append(errs, field.Invalid(startup.Flag("dry-run-paths"), p, "not a path starting with /"))
				continue
			}
			o.dryRun.PathPrefixes = append(o.dryRun.PathPrefixes, p)
		}
	}
	errs = append(errs, o.rateLimit.validate()...)
	if err := tracing.ValidateEndpoint(o.otlpEndpoint); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("otlp-traces-endpoint"), o.otlpEndpoint, err.Error()))
	}
	if o.kubeconfig != "" {
		if _, err := os.Stat(o.kubeconfig); err != nil {
			errs = append(errs, field.Invalid(startup.Flag("kubeconfig"), o.kubeconfig, err.Error()))
		}
	}
	if o.caFile != "" {
		if _, err := filewatch.LoadCABundle(o.caFile, time.Now()); err != nil {
			errs = append(errs, field.Invalid(startup.Flag("ca-file"), o.caFile, err.Error()))
		}
	}
	if o.signingKey != "" {
		if b, err := os.ReadFile(o.signingKey); err != nil {
			errs = append(errs, field.Invalid(startup.Flag("identity-signing-key-file"), o.signingKey, err.Error()))
		} else if _, err := assertion.ParseSigningKey(b); err != nil {
			errs = append(errs, field.Invalid(startup.Flag("identity-signing-key-file"), o.signingKey, err.Error()))
		}
	}
	return errs
}

// validAddr accepts host:port with a numeric port (host may be empty).
func validAddr(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("port %q is not a number from 0 to 65535", port)
	}
	return nil
}

// validate reads the --rate-limit-* flags into r.config.
func (r *rateLimitOptions) validate() field.ErrorList {
	var errs field.ErrorList
	switch r.mode {
	case ratelimit.ModeEnforce, ratelimit.ModeShadow, ratelimit.ModeOff:
	default:
		errs = append(errs, field.NotSupported(startup.Flag("rate-limit-mode"), r.mode, []string{ratelimit.ModeEnforce, ratelimit.ModeShadow, ratelimit.ModeOff}))
	}
	def, err := ratelimit.ParseLimit(r.limit)
	if err != nil {
		errs = append(errs, field.Invalid(startup.Flag("rate-limit"), r.limit, err.Error()))
	}
	classes, err := ratelimit.ParseClasses(r.classes)
	if err != nil {
		errs = append(errs, field.Invalid(startup.Flag("rate-limit-classes"), r.classes, err.Error()))
	}
	if r.classLabel != "" {
		if e := validation.IsQualifiedName(r.classLabel); len(e) > 0 {
			errs = append(errs, field.Invalid(startup.Flag("rate-limit-class-label"), r.classLabel, strings.Join(e, "; ")))
		}
	} else if len(classes) > 0 {
		errs = append(errs, field.Invalid(startup.Flag("rate-limit-classes"), r.classes, "needs --rate-limit-class-label"))
	}
	errs = startup.Collect(errs,
		startup.IntRange("rate-limit-max-runtimes", r.maxRuntimes, 1, 10_000_000),
		startup.DurationRange("rate-limit-report-interval", r.reportInterval, time.Second, time.Hour),
	)
	r.config = ratelimit.Config{Mode: r.mode, Default: def, Classes: classes, MaxRuntimes: r.maxRuntimes}
	return errs
}
