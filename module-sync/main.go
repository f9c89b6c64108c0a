// Command module-sync is Runtime Watcher's module resource sync
// (docs/architecture.md §4.11): a KCP operator built on the listener. It keeps
// its Watchers for the configured Module CR resources, mirrors every
// runtime's Module CRs into ModuleConfigs (on each watcher event, at start
// and periodically) and applies SyncResources into the runtimes. See
// module-sync/README.md and docs/module-sync.md.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/memlimit"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/controllers"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

func main() {
	var (
		o                         controllers.Options
		moduleResources, selector string
		serviceName               string
		servicePort               int64
		qps                       float64
		burst                     int
	)
	// --kubeconfig is registered by controller-runtime (pkg/client/config).
	fs := flag.CommandLine
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "address of the /metrics endpoint; \"0\" disables it")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "use leader election (the controllers run on one replica; the listener serves and is ready on every replica, one that does not lead answers events 503 with Retry-After)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&o.KymaNamespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs, their kubeconfig Secrets, ModuleConfigs, SyncResources and module-sync's Watchers")
	fs.StringVar(&moduleResources, "module-resources", "", "the SKR resources that are Module CRs: module=group/version/resource[,…] (version * = preferred; the module name is required: it is never taken from a runtime; required)")
	fs.StringVar(&o.ListenAddr, "listen-addr", ":8082", "address of the event endpoint (POST /v2/<manager>/event)")
	fs.StringVar(&o.Manager, "manager", controllers.DefaultManager, "manager name of the Watchers and the event path (a DNS-1123 label)")
	fs.StringVar(&serviceName, "service-name", "module-sync", "Watchers' serviceInfo: the Service of the listener, in --kyma-namespace")
	fs.Int64Var(&servicePort, "service-port", 8082, "Watchers' serviceInfo: the Service's port")
	fs.StringVar(&selector, "gateway-selector", "operator.kyma-project.io/watcher-gateway=default", "Watchers' gateway label selector: key=value[,…]")
	fs.StringVar(&o.Identity, "identity", "header", "how the sender is identified: header (behind ext-authz) or san-pinning (XFCC from the gateway)")
	fs.StringVar(&o.CAFile, "ca-file", "", "with --identity=san-pinning: client certificates must chain to this CA")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", "", "serve the event endpoint with TLS using this certificate (with --tls-key-file)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", "", "key of --tls-cert-file")
	fs.DurationVar(&o.MirrorInterval, "mirror-interval", controllers.DefaultMirrorInterval, "periodic mirror pass per runtime (events make it real-time; this repairs what an event missed)")
	fs.DurationVar(&o.DriftInterval, "drift-interval", controllers.DefaultDriftInterval, "periodic apply pass per SyncResource (corrects drift of CreateAndSync items in the runtime)")
	fs.DurationVar(&o.ConfirmDelay, "confirm-delay", 2*time.Second, "after an event, mirror the runtime again this much later (the SKR's webhook reports a change before it is stored); 0 disables")
	fs.DurationVar(&o.RetryBase, "retry-base", controllers.DefaultRetryBase, "first delay of the backoff after a pass that failed for a reason that may pass (doubles per failure)")
	fs.DurationVar(&o.RetryMax, "retry-max", controllers.DefaultRetryMax, "longest delay of that backoff")
	fs.DurationVar(&o.SKRTimeout, "skr-timeout", 10*time.Second, "timeout of each request to a runtime's API server")
	fs.IntVar(&o.Workers, "workers", 8, "runtimes mirrored and SyncResources applied in parallel (each)")
	fs.DurationVar(&o.PassTimeout, "pass-timeout", 0, "deadline of one pass over a runtime (mirror or apply); default 3 × --skr-timeout")
	fs.Float64Var(&qps, "kube-api-qps", 50, "KCP client queries per second")
	fs.IntVar(&burst, "kube-api-burst", 100, "KCP client burst")
	showVersion := version.BindFlag(fs)
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: module-sync [flags]\n\nKCP operator: mirrors SKR Module CRs into ModuleConfigs and applies SyncResources into the SKRs.\n\n")
		fs.PrintDefaults()
	}
	flag.Parse() // -h and --help print the usage and exit 0; bad flags exit 2
	if *showVersion {
		version.Print(os.Stdout, "module-sync")
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "module-sync: unexpected arguments: %q\n", flag.Args())
		os.Exit(2)
	}
	var err error
	if o.ModuleResources, err = controllers.ParseModuleResources(moduleResources); err != nil {
		fmt.Fprintf(os.Stderr, "module-sync: --module-resources: %v\n", err)
		os.Exit(2)
	}
	o.GatewaySelector = map[string]string{}
	for _, kv := range strings.Split(selector, ",") {
		if kv = strings.TrimSpace(kv); kv == "" {
			continue
		}
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(os.Stderr, "module-sync: --gateway-selector: %q is not key=value\n", kv)
			os.Exit(2)
		}
		o.GatewaySelector[k] = v
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("module-sync")
	if limit, source, err := memlimit.Apply(os.Getenv, memlimit.CgroupRoot, memlimit.DefaultRatio); err != nil {
		log.Info("no soft memory limit from the cgroup", "error", err.Error())
	} else {
		log.Info("soft memory limit", "limit", memlimit.String(limit), "source", source)
	}
	o.Service.Name, o.Service.Namespace, o.Service.Port = serviceName, o.KymaNamespace, servicePort

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = "module-sync"
	ctx := ctrl.SetupSignalHandler()
	mgr, err := controllers.New(ctx, cfg, o, nil)
	if err != nil {
		log.Error(err, "set up manager")
		os.Exit(1)
	}
	log.Info("starting", "version", version.Get(), "kymaNamespace", o.KymaNamespace, "moduleResources", moduleResources, "listenAddr", o.ListenAddr)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
