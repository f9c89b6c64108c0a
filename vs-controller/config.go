package main

import (
	"io"
	"strings"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/retirement"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

// config is vs-controller's command line: the manager's options and the
// KCP client's limits (flags only; no environment variables).
type config struct {
	startup.Common
	o vsmanager.Options
	// KCP client rate limits.
	qps   float64
	burst int

	// Flag values that parseConfig turns into o.
	issuerName, issuerKind                   string
	extraDNS                                 string
	caSecret, gwCASecret, gwClientCA, gwCert string
	extraCA                                  string
	readyURL, ingressFrom                    string
}

// parseConfig reads and validates the flags (args without the program
// name). -h and --help print the usage to errOut and return flag.ErrHelp;
// --version returns at once with Version set.
func parseConfig(args []string, errOut io.Writer) (*config, error) {
	c := &config{}
	fs := c.FlagSet("vs-controller", "KCP controller: Istio VirtualServices for Watchers, per-runtime certificates and the SKR bundle.", errOut)
	// --kubeconfig, read by ctrl.GetConfig.
	ctrlconfig.RegisterFlags(fs)
	fs.StringVar(&c.o.MetricsBindAddress, "metrics-bind-address", ":8080", "address of the /metrics endpoint; \"0\" disables it")
	fs.StringVar(&c.o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&c.o.LeaderElection, "leader-elect", false, "use leader election (one active replica)")
	fs.StringVar(&c.o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&c.o.ShardIdentity, "shard-identity", "", "share the runtimes with the other replicas (docs/operations.md, Scaling): this replica's member name, unique (the pod's name); needs --leader-elect (the Watchers, the CA trust and the health evaluation stay with the leader); empty: one replica does all per-runtime work (with --leader-elect: the leader)")
	fs.DurationVar(&c.o.ShardLeaseDuration, "shard-lease-duration", shards.DefaultLeaseDuration, "with --shard-identity: a member whose Lease did not change for this long is gone and its runtimes move (the renew deadline is 2/3 of it, the retry period 2/15)")
	fs.StringVar(&c.o.GatewayNamespace, "gateway-namespace", routing.DefaultGatewayNamespace, "namespace of the Istio Gateways that Watchers select")
	fs.StringVar(&c.o.KymaNamespace, "kyma-namespace", runtimes.DefaultKymaNamespace, "namespace of the Kyma CRs, their kubeconfig Secrets and Certificates")
	fs.StringVar(&c.o.Bundle.Namespace, "skr-namespace", bundle.DefaultNamespace, "namespace of the skr-webhook in every runtime")
	fs.StringVar(&c.issuerName, "issuer-name", "", "cert-manager issuer that signs the runtimes' certificates (required)")
	fs.StringVar(&c.issuerKind, "issuer-kind", "Issuer", "kind of that issuer: Issuer (in --kyma-namespace) or ClusterIssuer")
	fs.StringVar(&c.o.Bundle.Image, "skr-webhook-image", "", "skr-webhook image (default: the image in manifests/skr)")
	fs.StringVar(&c.o.Bundle.KCPAddr, "kcp-gateway-host", "", "KCP gateway host the SKR webhooks post events to (their --kcp-addr; required)")
	fs.StringVar(&c.o.Bundle.MinTLSVersion, "skr-webhook-min-tls-version", "", "the SKR webhooks' lowest TLS version towards the KCP gateway (their --min-tls-version): 1.2 or 1.3 (default: manifests/skr, 1.2)")
	fs.StringVar(&c.o.Bundle.WebhookURL, "skr-webhook-url", "", "LOCAL/TESTING AID: base URL (e.g. https://localhost:18443) the SKR API server calls instead of the skr-webhook Service")
	fs.StringVar(&c.ingressFrom, "skr-webhook-ingress-from", "", `who may reach the SKR webhook's admission port (its NetworkPolicy in every runtime): "" any source (the SKR API server is usually outside the pod network), "gardener" Gardener's vpn-shoot pods only (as Lifecycle Manager), or a JSON list of NetworkPolicy peers, e.g. [{"ipBlock":{"cidr":"10.250.0.0/16"}}]`)
	fs.StringVar(&c.extraDNS, "skr-webhook-extra-dns-names", "", "LOCAL/TESTING AID: comma-separated DNS names (e.g. localhost) added to every runtime certificate")
	fs.BoolVar(&c.o.Adoption.WithoutSkipReconciliation, "adopt-without-skip-reconciliation", false, "take over runtimes from Lifecycle Manager even when their Kyma lacks operator.kyma-project.io/skip-reconciliation=true (LM stopped another way)")
	fs.StringVar(&c.readyURL, "skr-webhook-ready-url", "", "LOCAL/TESTING AID: during a take-over from Lifecycle Manager, our webhook is ready when this URL answers over TLS verified by the runtime's CA (instead of the Deployment's readyReplicas)")
	fs.DurationVar(&c.o.SKRTimeout, "skr-timeout", 10*time.Second, "timeout of each request to a runtime's API server")
	fs.BoolVar(&c.o.AllowInsecureSKR, "allow-insecure-skr", false, "accept runtime kubeconfigs with insecure-skip-tls-verify: true (local use only; refused with an InvalidKubeconfig Event otherwise)")
	fs.DurationVar(&c.o.Resync, "skr-resync", 10*time.Minute, "how often a runtime's bundle is re-checked (reads only) to repair drift")
	fs.DurationVar(&c.o.KubeconfigRetry, "kubeconfig-retry", time.Minute, "how often a runtime whose kubeconfig Secret is missing is looked at again (only Secrets labelled app.kubernetes.io/part-of=runtime-watcher are watched)")
	fs.DurationVar(&c.o.WatcherDebounce, "watcher-debounce", time.Second, "delay before a Watcher change re-reconciles every runtime (batches bursts)")
	fs.IntVar(&c.o.RuntimeWorkers, "runtime-workers", 8, "runtimes reconciled in parallel")
	fs.IntVar(&c.o.WatcherWorkers, "watcher-workers", 4, "Watchers reconciled in parallel")
	fs.StringVar(&c.caSecret, "ca-secret", "runtime-watcher-ca", "runtime CA Secret (name in --kyma-namespace, or namespace/name) whose trust bundle vs-controller keeps during CA rotations; \"\" turns the rotation off")
	fs.StringVar(&c.gwCASecret, "gateway-ca-secret", "istio-system/kcp-gateway-ca", "gateway CA Secret (namespace/name): its bundle is every SKR's ca.crt; \"\": the runtime certificate's ca.crt")
	fs.StringVar(&c.gwClientCA, "gateway-client-ca-secret", "istio-system/kcp-gateway-tls-cacert", "Secret (namespace/name) vs-controller writes the runtime CA bundle into, the gateway's client CA; \"\": none")
	fs.StringVar(&c.gwCert, "gateway-certificate", "istio-system/kcp-gateway-tls", "gateway server Certificate (namespace/name), renewed once every SKR trusts a new gateway CA; \"\": never")
	fs.StringVar(&c.extraCA, "migration-extra-ca-secret", "", "MIGRATION FROM LIFECYCLE MANAGER: CA Secret (namespace/name, e.g. istio-system/klm-watcher) whose ca.crt CAs are added to the gateway's client CA bundle (not to the SKRs' trust); re-read every --ca-poll-interval; \"\" (default): window closed")
	fs.StringVar(&c.o.Trust.Store, "trust-store", trust.DefaultStore, "prefix of the ConfigMaps in --kyma-namespace remembering the CAs seen (<prefix>-runtime, <prefix>-gateway) and of the Secret keying their seals (<prefix>-seal, in --gateway-client-ca-secret's namespace)")
	fs.Float64Var(&c.o.Trust.RenewalsPerSecond, "ca-renewals-per-second", 5, "runtime certificate renewals requested per second after a CA rotation")
	fs.DurationVar(&c.o.Trust.Interval, "ca-poll-interval", 5*time.Second, "how often the CA Secrets are re-read")
	fs.DurationVar(&c.o.Trust.Settle, "ca-settle", trust.DefaultSettle, "how long a new CA must be in the trust anchors (written Secrets reach pods: kubelet sync, Istio SDS) before certificates are re-issued by it")
	fs.DurationVar(&c.o.CertificateDuration, "certificate-duration", 0, "lifetime of runtime certificates (0: cert-manager's default, 90 days)")
	fs.DurationVar(&c.o.CertificateRenewBefore, "certificate-renew-before", 0, "renew runtime certificates this long before they expire (0: cert-manager's default, a third of the lifetime)")
	fs.DurationVar(&c.o.CertificateOverlap, "certificate-overlap", retirement.DefaultOverlap, "how long a runtime's previous certificate stays good at the edge after its renewed one reached the SKR; older ones are refused (revoked) afterwards")
	fs.StringVar(&c.o.HealthReportBindAddress, "health-report-bind-address", ":8090", "address serving the SKR webhooks' health reports (POST "+contract.HealthPath+", routed by the KCP gateway; only the gateway may reach it); \"0\" turns the watch-path health evaluation off")
	fs.StringVar(&c.o.IdentityKeyFile, "identity-key-file", "", "PEM key set (Ed25519 CERTIFICATE, e.g. the tls.crt of ext-authz's signing Certificate, or PUBLIC KEY blocks) that a health report's identity signature (ext-authz's "+contract.HeaderIdentitySignature+") must verify against; reloaded when it changes; empty: reports are not verified (docs/security.md \"Routes cannot speak for a runtime\")")
	fs.DurationVar(&c.o.Health.Silence, "health-silence", health.DefaultSilence, "a runtime not heard for longer is flagged (three of the webhooks' --health-interval)")
	fs.DurationVar(&c.o.Health.CheckInterval, "health-check-interval", health.DefaultCheckInterval, "how often each runtime's SKR webhook configuration is checked (one metadata read in the steady state, spread over the interval), and a silent runtime diagnosed")
	fs.DurationVar(&c.o.Health.DeliveryGrace, "health-delivery-grace", health.DefaultDeliveryGrace, "a runtime whose deliveries to a manager all failed for this long is flagged (no-route, delivery-failing)")
	fs.DurationVar(&c.o.Health.Tick, "health-tick", health.DefaultTick, "how often every runtime's watch-path health is evaluated")
	fs.DurationVar(&c.o.Health.EventWindow, "health-event-window", health.DefaultEventWindow, "a runtime whose watch-path flag flips tells each change of cause (an Event on its Kyma, the Watchers' silentRuntimes, a resync on recovery) at most once per window; a change held back is told when the window has passed and it still holds")
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
	if c.issuerName == "" {
		errs = append(errs, field.Required(startup.Flag("issuer-name"), "the cert-manager issuer of the runtime certificates"))
	}
	if o.Bundle.KCPAddr == "" {
		errs = append(errs, field.Required(startup.Flag("kcp-gateway-host"), "the host the SKR webhooks post events to"))
	} else if _, err := bundle.KCPPort(o.Bundle.KCPAddr); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("kcp-gateway-host"), o.Bundle.KCPAddr, err.Error()))
	}
	var err error
	if o.Bundle.WebhookIngressFrom, err = bundle.ParseIngressFrom(c.ingressFrom); err != nil {
		errs = append(errs, field.Invalid(startup.Flag("skr-webhook-ingress-from"), c.ingressFrom, err.Error()))
	}
	if v := o.Bundle.MinTLSVersion; v != "" {
		errs = startup.Collect(errs, startup.OneOf("skr-webhook-min-tls-version", v, "1.2", "1.3"))
	}
	for _, f := range []struct {
		flag, value, def string
		key              *types.NamespacedName
	}{
		{"ca-secret", c.caSecret, o.KymaNamespace, &o.Trust.CASecret},
		{"gateway-ca-secret", c.gwCASecret, o.GatewayNamespace, &o.Trust.GatewayCASecret},
		{"gateway-client-ca-secret", c.gwClientCA, o.GatewayNamespace, &o.Trust.GatewayClientCASecret},
		{"gateway-certificate", c.gwCert, o.GatewayNamespace, &o.Trust.GatewayCertificate},
		{"migration-extra-ca-secret", c.extraCA, o.GatewayNamespace, &o.Trust.MigrationExtraCASecret},
	} {
		if *f.key, err = trust.ParseObjectKey(f.value, f.def); err != nil {
			errs = append(errs, field.Invalid(startup.Flag(f.flag), f.value, err.Error()))
		}
	}
	if o.Trust.MigrationExtraCASecret.Name != "" && (o.Trust.CASecret.Name == "" || o.Trust.GatewayClientCASecret.Name == "") {
		errs = append(errs, field.Invalid(startup.Flag("migration-extra-ca-secret"), c.extraCA,
			"needs --ca-secret and --gateway-client-ca-secret (the client CA bundle it is added to)"))
	}
	if o.ShardIdentity != "" && !o.LeaderElection {
		errs = append(errs, field.Invalid(startup.Flag("shard-identity"), o.ShardIdentity, "needs --leader-elect: the cluster-wide work (Watchers, CA trust, health) stays with one elected replica"))
	}
	if o.ShardLeaseDuration < 3*time.Second {
		errs = append(errs, field.Invalid(startup.Flag("shard-lease-duration"), o.ShardLeaseDuration.String(), "must be at least 3s"))
	}
	if c.qps <= 0 {
		errs = append(errs, field.Invalid(startup.Flag("kube-api-qps"), c.qps, "must be positive"))
	}
	if o.Trust.RenewalsPerSecond <= 0 {
		errs = append(errs, field.Invalid(startup.Flag("ca-renewals-per-second"), o.Trust.RenewalsPerSecond, "must be positive"))
	}
	errs = startup.Collect(errs,
		startup.OneOf("issuer-kind", c.issuerKind, "Issuer", "ClusterIssuer"),
		startup.DNSLabel("kyma-namespace", o.KymaNamespace),
		startup.DNSLabel("gateway-namespace", o.GatewayNamespace),
		startup.DNSLabel("skr-namespace", o.Bundle.Namespace),
		startup.IntRange("runtime-workers", o.RuntimeWorkers, 1, 1024),
		startup.IntRange("watcher-workers", o.WatcherWorkers, 1, 1024),
		startup.IntRange("kube-api-burst", c.burst, 1, 10000),
		startup.Positive("skr-timeout", o.SKRTimeout),
		startup.Positive("skr-resync", o.Resync),
		startup.Positive("kubeconfig-retry", o.KubeconfigRetry),
		startup.NotNegative("watcher-debounce", o.WatcherDebounce),
		startup.Positive("ca-poll-interval", o.Trust.Interval),
		startup.NotNegative("ca-settle", o.Trust.Settle),
		startup.NotNegative("certificate-duration", o.CertificateDuration),
		startup.NotNegative("certificate-renew-before", o.CertificateRenewBefore),
		startup.NotNegative("certificate-overlap", o.CertificateOverlap),
	)
	o.Issuer = cmmeta.IssuerReference{Name: c.issuerName, Kind: c.issuerKind, Group: "cert-manager.io"}
	for _, n := range strings.Split(c.extraDNS, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.ExtraDNSNames = append(o.ExtraDNSNames, n)
		}
	}
	if c.readyURL != "" {
		o.Adoption.Ready = takeover.URLReady(c.readyURL)
	}
	return errs
}
