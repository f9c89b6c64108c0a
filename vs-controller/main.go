// Command vs-controller is Runtime Watcher's KCP controller
// (docs/architecture.md §4.3, §3): it keeps one Istio VirtualService per Watcher
// CR, and for every runtime (Kyma CR) a cert-manager Certificate and the SKR
// bundle (skr-webhook Deployment, Service, Secret and the
// ValidatingWebhookConfiguration built from all Watchers) in the runtime's
// cluster.
package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/seed-c8be168e/runtime-watcher/memlimit"
	"github.com/seed-c8be168e/runtime-watcher/version"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/controllers"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

func main() {
	var (
		o                                        controllers.Options
		issuerName, kind                         string
		extraDNS                                 string
		caSecret, gwCASecret, gwClientCA, gwCert string
		extraCA                                  string
		readyURL, ingressFrom                    string
		qps                                      float64
		burst                                    int
	)
	// --kubeconfig is registered by controller-runtime (pkg/client/config).
	fs := flag.CommandLine
	fs.StringVar(&o.MetricsBindAddress, "metrics-bind-address", ":8080", "address of the /metrics endpoint; \"0\" disables it")
	fs.StringVar(&o.HealthProbeBindAddress, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	fs.BoolVar(&o.LeaderElection, "leader-elect", false, "use leader election (one active replica)")
	fs.StringVar(&o.LeaderElectionNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&o.GatewayNamespace, "gateway-namespace", routing.DefaultGatewayNamespace, "namespace of the Istio Gateways that Watchers select")
	fs.StringVar(&o.KymaNamespace, "kyma-namespace", runtimes.DefaultKymaNamespace, "namespace of the Kyma CRs, their kubeconfig Secrets and Certificates")
	fs.StringVar(&o.Bundle.Namespace, "skr-namespace", bundle.DefaultNamespace, "namespace of the skr-webhook in every runtime")
	fs.StringVar(&issuerName, "issuer-name", "", "cert-manager issuer that signs the runtimes' certificates (required)")
	fs.StringVar(&kind, "issuer-kind", "Issuer", "kind of that issuer: Issuer (in --kyma-namespace) or ClusterIssuer")
	fs.StringVar(&o.Bundle.Image, "skr-webhook-image", "", "skr-webhook image (default: the image in manifests/skr)")
	fs.StringVar(&o.Bundle.KCPAddr, "kcp-gateway-host", "", "KCP gateway host the SKR webhooks post events to (their --kcp-addr; required)")
	fs.StringVar(&o.Bundle.WebhookURL, "skr-webhook-url", "", "LOCAL/TESTING AID: base URL (e.g. https://localhost:18443) the SKR API server calls instead of the skr-webhook Service")
	fs.StringVar(&ingressFrom, "skr-webhook-ingress-from", "", `who may reach the SKR webhook's admission port (its NetworkPolicy in every runtime): "" any source (the SKR API server is usually outside the pod network), "gardener" Gardener's vpn-shoot pods only (as Lifecycle Manager), or a JSON list of NetworkPolicy peers, e.g. [{"ipBlock":{"cidr":"10.250.0.0/16"}}]`)
	fs.StringVar(&extraDNS, "skr-webhook-extra-dns-names", "", "LOCAL/TESTING AID: comma-separated DNS names (e.g. localhost) added to every runtime certificate")
	fs.BoolVar(&o.Adoption.WithoutSkipReconciliation, "adopt-without-skip-reconciliation", false, "take over runtimes from Lifecycle Manager even when their Kyma lacks operator.kyma-project.io/skip-reconciliation=true (LM stopped another way)")
	fs.StringVar(&readyURL, "skr-webhook-ready-url", "", "LOCAL/TESTING AID: during a take-over from Lifecycle Manager, our webhook is ready when this URL answers over TLS verified by the runtime's CA (instead of the Deployment's readyReplicas)")
	fs.DurationVar(&o.SKRTimeout, "skr-timeout", 10*time.Second, "timeout of each request to a runtime's API server")
	fs.BoolVar(&o.AllowInsecureSKR, "allow-insecure-skr", false, "accept runtime kubeconfigs with insecure-skip-tls-verify: true (local use only; refused with an InvalidKubeconfig Event otherwise)")
	fs.DurationVar(&o.Resync, "skr-resync", 10*time.Minute, "how often a runtime's bundle is re-checked (reads only) to repair drift")
	fs.DurationVar(&o.KubeconfigRetry, "kubeconfig-retry", time.Minute, "how often a runtime whose kubeconfig Secret is missing is looked at again (only Secrets labelled app.kubernetes.io/part-of=runtime-watcher are watched)")
	fs.DurationVar(&o.WatcherDebounce, "watcher-debounce", time.Second, "delay before a Watcher change re-reconciles every runtime (batches bursts)")
	fs.IntVar(&o.RuntimeWorkers, "runtime-workers", 8, "runtimes reconciled in parallel")
	fs.IntVar(&o.WatcherWorkers, "watcher-workers", 4, "Watchers reconciled in parallel")
	fs.StringVar(&caSecret, "ca-secret", "runtime-watcher-ca", "runtime CA Secret (name in --kyma-namespace, or namespace/name) whose trust bundle vs-controller keeps during CA rotations; \"\" turns the rotation off")
	fs.StringVar(&gwCASecret, "gateway-ca-secret", "istio-system/kcp-gateway-ca", "gateway CA Secret (namespace/name): its bundle is every SKR's ca.crt; \"\": the runtime certificate's ca.crt")
	fs.StringVar(&gwClientCA, "gateway-client-ca-secret", "istio-system/kcp-gateway-tls-cacert", "Secret (namespace/name) vs-controller writes the runtime CA bundle into, the gateway's client CA; \"\": none")
	fs.StringVar(&gwCert, "gateway-certificate", "istio-system/kcp-gateway-tls", "gateway server Certificate (namespace/name), renewed once every SKR trusts a new gateway CA; \"\": never")
	fs.StringVar(&extraCA, "migration-extra-ca-secret", "", "MIGRATION FROM LIFECYCLE MANAGER: CA Secret (namespace/name, e.g. istio-system/klm-watcher) whose ca.crt CAs are added to the gateway's client CA bundle (not to the SKRs' trust); re-read every --ca-poll-interval; \"\" (default): window closed")
	fs.StringVar(&o.Trust.Store, "trust-store", trust.DefaultStore, "prefix of the ConfigMaps in --kyma-namespace remembering the CAs seen (<prefix>-runtime, <prefix>-gateway) and of the Secret keying their seals (<prefix>-seal, in --gateway-client-ca-secret's namespace)")
	fs.Float64Var(&o.Trust.RenewalsPerSecond, "ca-renewals-per-second", 5, "runtime certificate renewals requested per second after a CA rotation")
	fs.DurationVar(&o.Trust.Interval, "ca-poll-interval", 5*time.Second, "how often the CA Secrets are re-read")
	fs.DurationVar(&o.Trust.Settle, "ca-settle", 2*time.Minute, "how long a new CA must be in the trust anchors (written Secrets reach pods: kubelet sync, Istio SDS) before certificates are re-issued by it")
	fs.DurationVar(&o.CertificateDuration, "certificate-duration", 0, "lifetime of runtime certificates (0: cert-manager's default, 90 days)")
	fs.DurationVar(&o.CertificateRenewBefore, "certificate-renew-before", 0, "renew runtime certificates this long before they expire (0: cert-manager's default, a third of the lifetime)")
	fs.Float64Var(&qps, "kube-api-qps", 50, "KCP client queries per second")
	fs.IntVar(&burst, "kube-api-burst", 100, "KCP client burst")
	showVersion := version.BindFlag(fs)
	zopts := zap.Options{}
	zopts.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: vs-controller [flags]\n\nKCP controller: Istio VirtualServices for Watchers, per-runtime certificates and the SKR bundle.\n\n")
		fs.PrintDefaults()
	}
	flag.Parse() // -h and --help print the usage and exit 0; bad flags exit 2
	if *showVersion {
		version.Print(os.Stdout, "vs-controller")
		os.Exit(0)
	}
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "vs-controller: unexpected arguments: %q\n", flag.Args())
		os.Exit(2)
	}
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&zopts)))
	log := ctrl.Log.WithName("vs-controller")
	if limit, source, err := memlimit.Apply(os.Getenv, memlimit.CgroupRoot, memlimit.DefaultRatio); err != nil {
		log.Info("no soft memory limit from the cgroup", "error", err.Error())
	} else {
		log.Info("soft memory limit", "limit", memlimit.String(limit), "source", source)
	}

	if issuerName == "" || o.Bundle.KCPAddr == "" {
		fmt.Fprintln(os.Stderr, "--issuer-name and --kcp-gateway-host are required")
		os.Exit(2)
	}
	if kind != "Issuer" && kind != "ClusterIssuer" {
		fmt.Fprintln(os.Stderr, "--issuer-kind must be Issuer or ClusterIssuer")
		os.Exit(2)
	}
	var err error
	if o.Bundle.WebhookIngressFrom, err = bundle.ParseIngressFrom(ingressFrom); err != nil {
		fmt.Fprintf(os.Stderr, "--skr-webhook-ingress-from: %v\n", err)
		os.Exit(2)
	}
	if _, err := bundle.KCPPort(o.Bundle.KCPAddr); err != nil {
		fmt.Fprintf(os.Stderr, "--kcp-gateway-host: %v\n", err)
		os.Exit(2)
	}
	for _, f := range []struct {
		flag, value, def string
		key              *types.NamespacedName
	}{
		{"--ca-secret", caSecret, o.KymaNamespace, &o.Trust.CASecret},
		{"--gateway-ca-secret", gwCASecret, o.GatewayNamespace, &o.Trust.GatewayCASecret},
		{"--gateway-client-ca-secret", gwClientCA, o.GatewayNamespace, &o.Trust.GatewayClientCASecret},
		{"--gateway-certificate", gwCert, o.GatewayNamespace, &o.Trust.GatewayCertificate},
		{"--migration-extra-ca-secret", extraCA, o.GatewayNamespace, &o.Trust.MigrationExtraCASecret},
	} {
		if *f.key, err = trust.ParseObjectKey(f.value, f.def); err != nil {
			fmt.Fprintf(os.Stderr, "%s: %v\n", f.flag, err)
			os.Exit(2)
		}
	}
	if o.Trust.MigrationExtraCASecret.Name != "" && (o.Trust.CASecret.Name == "" || o.Trust.GatewayClientCASecret.Name == "") {
		fmt.Fprintln(os.Stderr, "--migration-extra-ca-secret needs --ca-secret and --gateway-client-ca-secret (the client CA bundle it is added to)")
		os.Exit(2)
	}
	o.Issuer = cmmeta.IssuerReference{Name: issuerName, Kind: kind, Group: "cert-manager.io"}
	for _, n := range strings.Split(extraDNS, ",") {
		if n = strings.TrimSpace(n); n != "" {
			o.ExtraDNSNames = append(o.ExtraDNSNames, n)
		}
	}

	if readyURL != "" {
		o.Adoption.Ready = takeover.URLReady(readyURL)
	}

	cfg := ctrl.GetConfigOrDie()
	cfg.QPS, cfg.Burst = float32(qps), burst
	cfg.UserAgent = "vs-controller"
	ctx := ctrl.SetupSignalHandler()
	mgr, err := controllers.New(ctx, cfg, o)
	if err != nil {
		log.Error(err, "set up manager")
		os.Exit(1)
	}
	log.Info("starting", "version", version.Get(), "gatewayNamespace", o.GatewayNamespace, "kymaNamespace", o.KymaNamespace, "skrNamespace", o.Bundle.Namespace,
		"skrWebhookIngressFrom", bundle.FormatIngressFrom(o.Bundle.WebhookIngressFrom))
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
