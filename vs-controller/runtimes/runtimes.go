// Package runtimes is vs-controller's runtime reconciler (docs/architecture.md
// §3.2): for every Kyma CR with an skr-domain annotation and a kubeconfig
// Secret it keeps a cert-manager Certificate in the KCP and, once the
// Certificate's Secret exists, applies the SKR bundle (namespace, Secret
// skr-webhook-tls, skr-webhook Deployment and Service, and the
// ValidatingWebhookConfiguration built from all Watchers) into the runtime's
// cluster. Deleting the Kyma removes the bundle and the Certificate.
//
// The package wires and writes; what it writes is built elsewhere: the
// Certificate by package certificates, the bundle by package bundle, and the
// runtime clients come from package skrclient. It calls the take-over of
// runtimes Lifecycle Manager set up (package takeover, through the TakeOver
// interface) and the trust keeper (package trust) for the CA bundles its
// bundle carries. Files: setup.go (watches and event mapping), reconcile.go
// (one pass), finalize.go (removal), expiry.go (the trust a bundle carries,
// certificate expiry), health.go (the runtimes the watch-path health
// evaluator looks after), probe.go (what it sees of each, health.Prober:
// two ordered chains of checks, the first cause found wins).
//
// Conventions (documented in the README):
//   - runtime ID: the Kyma's label kyma-project.io/runtime-id, else its name;
//   - kubeconfig: Secret kubeconfig-<runtime-id> in the Kyma's namespace,
//     key "config" (Lifecycle Manager's convention, package skrclient);
//   - Certificate and its Secret: <runtime-id>-webhook-tls in the Kyma's
//     namespace, owned by the Kyma (package certificates).
package runtimes

import (
	"context"
	"sync"
	"time"

	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/pacing"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/retirement"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/takeover"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

const (
	// Finalizer on Kyma CRs: the SKR bundle and the Certificate are removed
	// before the Kyma goes away.
	Finalizer = "operator.kyma-project.io/runtime-watcher"
	// FieldOwner is the server-side apply field manager, in the KCP and in
	// every SKR (diffapply.FieldOwner).
	FieldOwner = diffapply.FieldOwner
	// ControllerName names the controller (logs, metrics).
	ControllerName = "runtime-skr-bundle"
	// DefaultKymaNamespace is where Kyma CRs, kubeconfig Secrets and
	// Certificates live.
	DefaultKymaNamespace = "kcp-system"

	// Event reasons on the Kyma.
	ReasonInvalidRuntime    = "InvalidRuntime"
	ReasonInvalidKubeconfig = "InvalidKubeconfig"
	ReasonCertificate       = "CertificateFailed"
	ReasonUnreachable       = "RuntimeUnreachable"
	ReasonBundleApplied     = "SKRBundleApplied"
	ReasonBundleFailed      = "SKRBundleFailed"
	ReasonBundleRemoved     = "SKRBundleRemoved"
	ReasonBundleLeft        = "SKRBundleLeftInPlace"
	ReasonCleanupFailed     = "CleanupFailed"

	defaultWorkers         = 8
	defaultKubeconfigRetry = time.Minute
	defaultResync          = 10 * time.Minute
	defaultWatcherDebunce  = time.Second
)

var kymaGVK = v1beta2.KymaGroupVersionKind

// Reconciler keeps each runtime's Certificate and SKR bundle.
type Reconciler struct {
	// Client of the KCP (the manager's cached client). Its cache holds only
	// the Secrets labelled contract.LabelPartOf=contract.PartOf
	// (vsmanager.New).
	Client client.Client
	// APIReader reads the KCP uncached (the manager's GetAPIReader): the
	// kubeconfig Secrets the cache does not hold (kubeconfig.go). Without
	// it only labelled kubeconfig Secrets are found.
	APIReader client.Reader
	// KubeconfigRetry: a runtime whose kubeconfig Secret is missing is
	// looked at again after this long (the creation of an unlabelled
	// Secret triggers no pass); 1m when 0.
	KubeconfigRetry time.Duration
	Recorder        events.EventRecorder
	// Clients gives the runtime clusters' clients; SKRClients() when nil.
	Clients skrclient.ClusterClients
	// KymaNamespace holds the Kymas, kubeconfig Secrets and Certificates.
	KymaNamespace string
	// Issuer signs the Certificates.
	Issuer cmmeta.IssuerReference
	// ExtraDNSNames are added to every Certificate (local/testing aid, e.g.
	// "localhost" when the skr-webhook runs as a local process).
	ExtraDNSNames []string
	// CertificateDuration and CertificateRenewBefore set the runtime
	// Certificates' lifetime; cert-manager's defaults (90 days, a third of
	// it) when 0.
	CertificateDuration, CertificateRenewBefore time.Duration
	// Retirer retires a runtime's previous certificates once its current
	// one reached the SKR and drives revocations (package retirement);
	// nil: certificates are good until they expire.
	Retirer *retirement.Retirer
	// Bundle shapes the SKR objects.
	Bundle bundle.Options
	// WatcherDebounce delays the re-reconcile of every runtime after a
	// Watcher change, so a burst of changes costs one pass; 1s when 0,
	// none when negative.
	WatcherDebounce time.Duration
	// Resync re-checks a healthy runtime's bundle (reads only, repairs
	// drift in the SKR); 10m when 0, never when negative.
	Resync time.Duration
	// MaxConcurrentReconciles; 8 when 0. Runtimes are independent: a slow
	// or unreachable one holds one worker for at most the client timeout.
	MaxConcurrentReconciles int
	// Trust keeps the CA trust bundles and renews runtime certificates
	// after a CA rotation (docs/certificates.md); nil: the SKR's caBundle
	// and ca.crt are the runtime certificate's ca.crt.
	Trust *trust.Keeper

	// Shards, when set, shares the runtimes with the other replicas (package
	// shards, issue 36): a pass runs only on the runtime's owner, under its
	// published view; the controller runs on every replica. Nil: one
	// replica (the leader) reconciles every runtime, as before.
	Shards *shards.Shards

	// Adoption configures the take-over of runtimes Lifecycle Manager set
	// up (package takeover), when TakeOver is nil.
	Adoption takeover.Options
	// TakeOver adopts runtimes Lifecycle Manager set up; a
	// takeover.TakeOver with Adoption when nil.
	TakeOver TakeOver

	memo diffapply.Memo
	// unlabelled: runtime key -> true once an unlabelled kubeconfig Secret
	// was logged (once per runtime and process).
	unlabelled sync.Map
	webhooks   bundle.WebhookConfigurations
	bundles    bundle.Bundles
	// bundled: runtime key -> time.Time of the first bundle pass that
	// completed in this process; only such runtimes are evaluated for
	// watch-path health (health.go).
	bundled sync.Map
	// requeue enqueues the runtimes this replica gained (shards).
	requeue pacing.Requeue
}

// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=kymas,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=kymas/finalizers,verbs=update
// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=kymas/status,verbs=patch
// +kubebuilder:rbac:groups=operator.kyma-project.io,resources=watchers,verbs=get;list;watch
// +kubebuilder:rbac:groups=cert-manager.io,namespace=kcp-system,resources=certificates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups=cert-manager.io,namespace=kcp-system,resources=certificates/status,verbs=patch
// +kubebuilder:rbac:groups=cert-manager.io,namespace=istio-system,resources=certificates,verbs=get
// +kubebuilder:rbac:groups=cert-manager.io,namespace=istio-system,resources=certificates/status,verbs=patch
// +kubebuilder:rbac:groups="",namespace=kcp-system,resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=istio-system,resources=secrets,verbs=get;create;update
// +kubebuilder:rbac:groups="",namespace=kcp-system,resources=secrets,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// TakeOver is the take-over of runtimes Lifecycle Manager set up, as the
// reconciler uses it (takeover.TakeOver).
type TakeOver interface {
	// Adopt runs before the bundle pass; the pass runs only when proceed.
	Adopt(ctx context.Context, kyma client.Object, runtimeKey string, skr client.Client, tls *certificates.TLS, caBundle []byte) (proceed bool, res ctrl.Result, err error)
	// Finish runs after a successful bundle pass (tls.CA: the runtime CA
	// bundle).
	Finish(ctx context.Context, kyma client.Object, runtimeKey string, skr client.Client, tls *certificates.TLS) (ctrl.Result, error)
	// Forget drops what is known of a runtime (removed).
	Forget(runtimeKey string)
}

// skrBundle is the reconciler's bundle as the take-over uses it.
type skrBundle struct{ r *Reconciler }

func (b skrBundle) Desired(ctx context.Context, tls *certificates.TLS, caBundle []byte) ([]*unstructured.Unstructured, error) {
	return b.r.desiredBundle(ctx, tls, caBundle)
}

func (b skrBundle) Apply(ctx context.Context, runtimeKey string, skr client.Client, objs []*unstructured.Unstructured) (int, error) {
	return b.r.applyObjects(ctx, runtimeKey, skr, objs)
}

func (b skrBundle) ForgetApplied(runtimeKey string) { b.r.memo.ForgetPrefix(runtimeKey + "|") }

// SKRClients is a cache of runtime clients that know the SKR bundle's kinds
// (no discovery), with vs-controller's user agent and the default timeout.
func SKRClients() *skrclient.KubeconfigClients {
	return &skrclient.KubeconfigClients{
		Scheme:    bundle.Scheme(),
		Mapper:    skrclient.NewRESTMapper(bundle.Kinds()),
		UserAgent: FieldOwner,
	}
}

// NewKyma is an empty Kyma for metadata-only reads (identity.NewKyma).
func NewKyma() *metav1.PartialObjectMetadata { return identity.NewKyma() }

func newKymaList() *metav1.PartialObjectMetadataList { return identity.NewKymaList() }

// RuntimeID of a Kyma: identity.RuntimeIDOf, its label
// kyma-project.io/runtime-id, else its name.
func RuntimeID(kyma client.Object) string { return identity.RuntimeIDOf(kyma) }
