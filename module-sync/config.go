package main

import (
	"io"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/seed-c8be168e/runtime-watcher/filewatch"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/startup"
)

// config is module-sync's command line: the manager's options and the KCP
// client's limits (flags only; no environment variables).
type config struct {
	startup.Common
	o syncmanager.Options
	// KCP client rate limits.
	qps   float64
	burst int

	// Flag values that parseConfig turns into o.
	moduleResources, selector, platformWriters string
	serviceName                                string
	servicePort                                int64
}

// parseConfig reads and validates the flags (args without the program
// name). -h and --help print the usage to errOut and return flag.ErrHelp;
// --version returns at once with Version set.
func parseConfig(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := c.FlagSet("module-sync", "KCP operator: mirrors SKR Module CRs into ModuleConfigs and applies SyncResources into the SKRs.", errOut)
	// --kubeconfig, read by ctrl.GetConfig.
	ctrlconfig.RegisterFlags(fs)
	fs.StringVar(&c.o.MetricsBindAddress, "metrics-bind-address", ":8080", "address of the /metrics endpoint; \"0\" disables it")
	fs.StringVar(&c.o.PprofBindAddress, "pprof-bind-address", "", "address of Go's /debug/pprof (profiles for measuring, docs/performance.md); empty: none")
	fs.StringVar(&c.o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&c.o.LeaderElection, "leader-elect", false, "use leader election (the controllers run on one replica; the listener serves and is ready on every replica, one that does not lead answers events 503 with Retry-After)")
	fs.StringVar(&c.o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&c.o.ShardIdentity, "shard-identity", "", "share the runtimes with the other replicas (docs/operations.md, Scaling): this replica's member name, unique (the pod's name); empty: one replica does all per-runtime work (with --leader-elect: the leader)")
	fs.DurationVar(&c.o.ShardLeaseDuration, "shard-lease-duration", shards.DefaultLeaseDuration, "with --shard-identity: a member whose Lease did not change for this long is gone and its runtimes move (the renew deadline is 2/3 of it, the retry period 2/15)")
	fs.StringVar(&c.o.KymaNamespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs, their kubeconfig Secrets, ModuleConfigs, SyncResources and module-sync's Watchers")
	fs.StringVar(&c.moduleResources, "module-resources", "", "the SKR resources that are Module CRs: module=group/version/resource[,…] (version * = preferred; the module name is required: it is never taken from a runtime; required)")
	fs.StringVar(&c.o.ListenAddr, "listen-addr", ":8082", "address of the event endpoint (POST /v2/<manager>/event)")
	fs.StringVar(&c.o.Manager, "manager", syncmanager.DefaultManager, "manager name of the Watchers and the event path (a DNS-1123 label)")
	fs.StringVar(&c.serviceName, "service-name", "module-sync", "Watchers' serviceInfo: the Service of the listener, in --kyma-namespace")
	fs.Int64Var(&c.servicePort, "service-port", 8082, "Watchers' serviceInfo: the Service's port")
	fs.StringVar(&c.selector, "gateway-selector", "operator.kyma-project.io/watcher-gateway=default", "Watchers' gateway label selector: key=value[,…]")
	fs.StringVar(&c.o.Identity, "identity", "header", "how the sender is identified: header (behind ext-authz) or san-pinning (XFCC from the gateway)")
	fs.StringVar(&c.o.IdentityKeyFile, "identity-key-file", "", "verify ext-authz's identity signature against the Ed25519 public keys of this PEM file (the tls.crt of the signing Certificate; reloaded when it changes); empty: the identity headers are trusted as the gateway passes them")
	fs.StringVar(&c.o.CAFile, "ca-file", "", "with --identity=san-pinning: client certificates must chain to the CAs of this PEM file (reloaded when it changes)")
	fs.StringVar(&c.o.TLSCertFile, "tls-cert-file", "", "serve the event endpoint with TLS using this certificate (with --tls-key-file)")
	fs.StringVar(&c.o.TLSKeyFile, "tls-key-file", "", "key of --tls-cert-file")
	fs.DurationVar(&c.o.MirrorInterval, "mirror-interval", syncmanager.DefaultMirrorInterval, "periodic mirror pass per runtime (events make it real-time; this repairs what an event missed)")
	fs.DurationVar(&c.o.DriftInterval, "drift-interval", syncmanager.DefaultDriftInterval, "periodic apply pass per SyncResource (corrects drift of CreateAndSync items in the runtime)")
	fs.DurationVar(&c.o.ConfirmDelay, "confirm-delay", 2*time.Second, "after an event, mirror the runtime again this much later (the SKR's webhook reports a change before it is stored); 0 disables")
	fs.DurationVar(&c.o.RetryBase, "retry-base", syncmanager.DefaultRetryBase, "first delay of the backoff after a pass that failed for a reason that may pass (doubles per failure)")
	fs.DurationVar(&c.o.RetryMax, "retry-max", syncmanager.DefaultRetryMax, "longest delay of that backoff")
	fs.DurationVar(&c.o.SKRTimeout, "skr-timeout", 10*time.Second, "timeout of each request to a runtime's API server")
	fs.IntVar(&c.o.Workers, "workers", 8, "runtimes mirrored and SyncResources applied in parallel (each)")
	fs.DurationVar(&c.o.PassTimeout, "pass-timeout", 0, "deadline of one pass over a runtime (mirror or apply); default 3 × --skr-timeout")
	fs.StringVar(&c.platformWriters, "platform-writers", "", "comma-separated KCP users whose SyncResources are applied under their module's grant without being named in its spec.managers (the platform's own tools); everybody else's only while the grant names them (docs/security.md)")
	fs.Float64Var(&c.qps, "kube-api-qps", 50, "KCP client queries per second")
	fs.IntVar(&c.burst, "kube-api-burst", 100, "KCP client burst")
	if err := c.Parse(fs, args); err != nil || c.Version {
		return c, err
	}
	if errs := c.validate(); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	return c, nil
}

// validate checks every flag, collecting every problem, and turns the flag
// values into c.o.
func (c *config) validate() field.ErrorList {
	o := &c.o
	var errs field.ErrorList
	var err error
	if strings.TrimSpace(c.moduleResources) == "" {
		errs = append(errs, field.Required(startup.Flag("module-resources"), "module=group/version/resource[,…]"))
	} else if o.ModuleResources, err = syncmanager.ParseModuleResources(c.moduleResources); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("module-resources"), c.moduleResources, err.Error()))
	}
	o.GatewaySelector = map[string]string{}
	for _, kv := range strings.Split(c.selector, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			errs = append(errs, field.Invalid(startup.Flag("gateway-selector"), kv, "not key=value"))
			continue
		}
		o.GatewaySelector[k] = v
	}
	for _, u := range strings.Split(c.platformWriters, ",") {
		if u = strings.TrimSpace(u); u != "" {
			o.PlatformWriters = append(o.PlatformWriters, u)
		}
	}
	if c.servicePort < 1 || c.servicePort > 65535 {
		errs = append(errs, field.Invalid(startup.Flag("service-port"), c.servicePort, "must be from 1 to 65535"))
	}
	if o.RetryMax < o.RetryBase {
		errs = append(errs, field.Invalid(startup.Flag("retry-max"), o.RetryMax.String(), "must not be less than --retry-base"))
	}
	if o.CAFile != "" && o.Identity != "san-pinning" {
		errs = append(errs, field.Invalid(startup.Flag("ca-file"), o.CAFile, "needs --identity=san-pinning"))
	} else if _, err := filewatch.LoadCABundle(o.CAFile, time.Now()); o.CAFile != "" && err != nil {
		errs = append(errs, field.Invalid(startup.Flag("ca-file"), o.CAFile, err.Error()))
	}
	if c.qps <= 0 {
		errs = append(errs, field.Invalid(startup.Flag("kube-api-qps"), c.qps, "must be positive"))
	}
	errs = startup.Collect(errs,
		startup.DNSLabel("kyma-namespace", o.KymaNamespace),
		startup.DNSLabel("manager", o.Manager),
		startup.DNSLabel("service-name", c.serviceName),
		startup.OneOf("identity", o.Identity, "header", "san-pinning"),
		startup.Together("tls-cert-file", o.TLSCertFile, "tls-key-file", o.TLSKeyFile),
		startup.IntRange("workers", o.Workers, 1, 1024),
		startup.IntRange("kube-api-burst", c.burst, 1, 10000),
		startup.Positive("mirror-interval", o.MirrorInterval),
		startup.Positive("drift-interval", o.DriftInterval),
		startup.Positive("retry-base", o.RetryBase),
		startup.Positive("skr-timeout", o.SKRTimeout),
		startup.NotNegative("confirm-delay", o.ConfirmDelay),
		startup.NotNegative("pass-timeout", o.PassTimeout),
	)
	o.Service.Name, o.Service.Namespace, o.Service.Port = c.serviceName, o.KymaNamespace, c.servicePort
	return errs
}
