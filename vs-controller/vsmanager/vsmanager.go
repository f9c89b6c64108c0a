// Package vsmanager builds vs-controller's controller-runtime manager: the Watcher
// reconciler (package routing) and the runtime reconciler (package
// runtimes) with its trust keeper (package trust), with a cache restricted to the namespaces each kind lives in and
// health checks that reflect the cache's state. The binary and the
// integration tests build the very same manager from it.
package vsmanager

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity/assertion"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/health"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/kubeconfigs"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/retirement"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routing"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/runtimes"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// Options configure the manager.
type Options struct {
	MetricsBindAddress     string
	HealthProbeBindAddress string
	LeaderElection         bool
	// LeaderElectionNamespace; the Kyma namespace when empty.
	LeaderElectionNamespace string

	GatewayNamespace string
	KymaNamespace    string
	Issuer           cmmeta.IssuerReference
	ExtraDNSNames    []string
	Bundle           bundle.Options
	// CertificateDuration, CertificateRenewBefore: see runtimes.Reconciler.
	CertificateDuration, CertificateRenewBefore time.Duration
	// CertificateOverlap: how long a runtime's previous certificate stays
	// good after its successor reached the SKR (retirement.DefaultOverlap
	// when 0).
	CertificateOverlap time.Duration

	// Clients of the runtime clusters; runtimes.SKRClients() with
	// SKRTimeout when nil.
	Clients    skrclient.ClusterClients
	SKRTimeout time.Duration
	// AllowInsecureSKR accepts runtime kubeconfigs that skip TLS
	// verification (skrclient.ErrInsecure otherwise).
	AllowInsecureSKR bool
	// WatcherDebounce, Resync, KubeconfigRetry: see runtimes.Reconciler.
	WatcherDebounce time.Duration
	Resync          time.Duration
	KubeconfigRetry time.Duration
	// Workers of the Watcher and runtime controllers (defaults when 0).
	WatcherWorkers int
	RuntimeWorkers int

	// Trust: the CA rotation (docs/certificates.md); off when
	// Trust.CASecret is empty.
	Trust trust.Options
	// Adoption: the take-over of runtimes Lifecycle Manager set up.
	Adoption takeover.Options

	// HealthReportBindAddress serves the SKR webhooks' health reports
	// (contract.HealthPath, routed by the gateway); "" or "0": no health
	// evaluation. Health tunes the evaluation (package health).
	HealthReportBindAddress string
	Health                  health.Options
	// IdentityKeyFile, when set, is the key set file (Ed25519 public keys,
	// reloaded) a health report's identity signature must verify against
	// (health.Tracker.VerifyIdentity); "": reports are not verified.
	IdentityKeyFile string

	// ShardIdentity, when set, shares the runtimes with the other replicas
	// (package shards, docs/operations.md "Scaling"): this replica is the
	// member of that name; the runtime reconciler (certificates, SKR
	// bundles, take-over, the evidence of what each SKR holds) runs on every
	// replica, each on the runtimes it owns; the cluster-wide work (Watchers
	// → VirtualServices, the CA trust bundles and the gateway certificate,
	// the watch-path health evaluation) stays with the elected replica, so
	// LeaderElection is required. Empty: one replica does everything (with
	// LeaderElection, the leader), exactly as before.
	ShardIdentity string
	// ShardLeaseDuration: shards.Options.LeaseDuration (the renew deadline
	// and retry period follow from it).
	ShardLeaseDuration time.Duration

	// SkipNameValidation lets tests build several managers in one process.
	SkipNameValidation bool
}

// ShardGroup is vs-controller's group of shard members (their Leases are
// vs-controller-shard-<identity>, labelled shards.LabelGroup=vs-controller).
const ShardGroup = "vs-controller"

// Scheme has the kinds vs-controller reads and writes in the KCP.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	utilruntime.Must(v1beta2.AddToScheme(s))
	utilruntime.Must(istionetworkingv1.AddToScheme(s))
	utilruntime.Must(certmanagerv1.AddToScheme(s))
	return s
}

// newManager is ctrl.NewManager; the tests build the manager over a fake
// cluster with it.
var newManager = ctrl.NewManager

// New builds the manager with both reconcilers registered.
func New(ctx context.Context, cfg *rest.Config, o Options) (ctrl.Manager, error) {
	if o.GatewayNamespace == "" {
		o.GatewayNamespace = routing.DefaultGatewayNamespace
	}
	if o.KymaNamespace == "" {
		o.KymaNamespace = runtimes.DefaultKymaNamespace
	}
	if o.Issuer.Name == "" {
		return nil, errors.New("an issuer name is required")
	}
	if o.LeaderElectionNamespace == "" {
		o.LeaderElectionNamespace = o.KymaNamespace
	}
	if o.ShardIdentity != "" {
		if !o.LeaderElection {
			return nil, errors.New("shards need leader election: the cluster-wide work stays with one elected replica")
		}
		cfg = shards.WithUserAgent(cfg, o.ShardIdentity)
		cfg.Wrap(shards.FenceTransport) // a pass's KCP writes, once its member is past its renew deadline: not sent
	}
	inKymaNS := map[string]cache.Config{o.KymaNamespace: {}}
	// Least privilege (docs/security.md): of the Secrets in the Kyma
	// namespace only ours are cached and watched. A Secret without the label
	// is invisible to mgr.GetClient() (NotFound); read it with
	// mgr.GetAPIReader() (uncached), as runtimes.Reconciler does for
	// kubeconfig Secrets nobody labelled and the trust keeper for CA Secrets.
	ours := labels.SelectorFromSet(labels.Set{contract.LabelPartOf: contract.PartOf})
	mgr, err := newManager(cfg, manager.Options{
		Scheme:                  Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsBindAddress},
		HealthProbeBindAddress:  o.HealthProbeBindAddress,
		LeaderElection:          o.LeaderElection,
		LeaderElectionID:        "vs-controller.operator.kyma-project.io",
		LeaderElectionNamespace: o.LeaderElectionNamespace,
		Controller:              config.Controller{SkipNameValidation: &o.SkipNameValidation},
		Cache: cache.Options{ByObject: map[client.Object]cache.ByObject{
			&istionetworkingv1.Gateway{}: {Namespaces: map[string]cache.Config{o.GatewayNamespace: {}}},
			runtimes.NewKyma():           {Namespaces: inKymaNS},
			&corev1.Secret{}:             {Namespaces: inKymaNS, Label: ours},
			&certmanagerv1.Certificate{}: {Namespaces: inKymaNS},
			&rbacv1.Role{}:               {Namespaces: inKymaNS},
		}},
	})
	if err != nil {
		return nil, fmt.Errorf("new manager: %w", err)
	}
	rec := &routing.Reconciler{
		Client:                  mgr.GetClient(),
		Recorder:                mgr.GetEventRecorder("vs-controller"),
		GatewayNamespace:        o.GatewayNamespace,
		MaxConcurrentReconciles: o.WatcherWorkers,
	}
	if err := rec.SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("watcher controller: %w", err)
	}
	clients := o.Clients
	if clients == nil {
		c := runtimes.SKRClients()
		c.Timeout = o.SKRTimeout
		c.AllowInsecure = o.AllowInsecureSKR
		if o.ShardIdentity != "" {
			c.UserAgent = shards.UserAgent(c.UserAgent, o.ShardIdentity) // the SKRs' audit names the replica
			c.WrapTransport = shards.FenceTransport
		}
		clients = c
	}
	var members *shards.Shards
	if o.ShardIdentity != "" {
		if members, err = shards.ForConfig(cfg, o.LeaderElectionNamespace, ShardGroup, o.ShardIdentity, o.ShardLeaseDuration, ctrl.Log.WithName("shards")); err != nil {
			return nil, err
		}
		if err := mgr.Add(members); err != nil {
			return nil, err
		}
	}
	rr := &runtimes.Reconciler{
		Client:                  mgr.GetClient(),
		APIReader:               mgr.GetAPIReader(),
		KubeconfigRetry:         o.KubeconfigRetry,
		Recorder:                mgr.GetEventRecorder("vs-controller"),
		Clients:                 clients,
		KymaNamespace:           o.KymaNamespace,
		Issuer:                  o.Issuer,
		ExtraDNSNames:           o.ExtraDNSNames,
		CertificateDuration:     o.CertificateDuration,
		CertificateRenewBefore:  o.CertificateRenewBefore,
		Retirer:                 &retirement.Retirer{Client: mgr.GetClient(), Overlap: o.CertificateOverlap, Recorder: mgr.GetEventRecorder("vs-controller")},
		Bundle:                  o.Bundle,
		WatcherDebounce:         o.WatcherDebounce,
		Resync:                  o.Resync,
		MaxConcurrentReconciles: o.RuntimeWorkers,
		Adoption:                o.Adoption,
		Shards:                  members,
	}
	if rr.Trust, err = o.Trust.Keeper(mgr, o.KymaNamespace); err != nil {
		return nil, err
	}
	if err := rr.SetupWithManager(ctx, mgr); err != nil {
		return nil, fmt.Errorf("runtime controller: %w", err)
	}
	if a := o.HealthReportBindAddress; a != "" && a != "0" {
		tracker := health.NewTracker(nil, health.MaxRuntimes)
		if o.IdentityKeyFile != "" {
			v, w, err := assertion.VerifierFromFile(o.IdentityKeyFile, mgr.GetLogger().WithName("identity-key-file"))
			if err != nil {
				return nil, fmt.Errorf("--identity-key-file: %w", err)
			}
			if err := mgr.Add(w); err != nil {
				return nil, err
			}
			tracker.VerifyIdentity(v)
		} else {
			mgr.GetLogger().Info("health reports' identity is not verified (no --identity-key-file): a route bound to the gateway could report for any runtime")
		}
		ev := health.NewEvaluator(o.Health, tracker, rr.HealthRuntimes, rr, &health.KCPReporter{
			Client: mgr.GetClient(), Recorder: mgr.GetEventRecorder("vs-controller"), Log: mgr.GetLogger().WithName("health"),
		}, mgr.GetLogger().WithName("health"))
		if err := mgr.Add(ev); err != nil {
			return nil, err
		}
		if err := mgr.Add(&health.Server{Addr: a, Handler: tracker.Handler(ev.Evaluates)}); err != nil {
			return nil, err
		}
	}
	// module-sync reads exactly the runtimes' kubeconfig Secrets.
	if err := (&kubeconfigs.Reconciler{Client: mgr.GetClient(), KymaNamespace: o.KymaNamespace}).SetupWithManager(mgr); err != nil {
		return nil, fmt.Errorf("module-sync kubeconfig access controller: %w", err)
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return nil, err
	}
	if err := mgr.AddReadyzCheck("cache-synced", cacheSynced(mgr.GetCache())); err != nil {
		return nil, err
	}
	return mgr, nil
}

// cacheSynced is ready once the informers have synced: before that the
// reconcilers would act on an empty view of the cluster.
func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 100*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("informer caches have not synced")
		}
		return nil
	}
}
