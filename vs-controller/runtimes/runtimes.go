// Package runtimes is vs-controller's runtime reconciler (ARCHITECTURE.md
// §3.2): for every Kyma CR with an skr-domain annotation and a kubeconfig
// Secret it keeps a cert-manager Certificate in the KCP and, once the
// Certificate's Secret exists, applies the SKR bundle (namespace, Secret
// skr-webhook-tls, skr-webhook Deployment and Service, and the
// ValidatingWebhookConfiguration built from all Watchers) into the runtime's
// cluster. Deleting the Kyma removes the bundle and the Certificate.
//
// Conventions (documented in the README):
//   - runtime ID: the Kyma's label kyma-project.io/runtime-id, else its name;
//   - kubeconfig: Secret kubeconfig-<runtime-id> in the Kyma's namespace,
//     key "config" (Lifecycle Manager's convention);
//   - Certificate and its Secret: <runtime-id>-webhook-tls in the Kyma's
//     namespace, owned by the Kyma.
package runtimes

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	cmmeta "github.com/cert-manager/cert-manager/pkg/apis/meta/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/apply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

const (
	// Finalizer on Kyma CRs: the SKR bundle and the Certificate are removed
	// before the Kyma goes away.
	Finalizer = "operator.kyma-project.io/runtime-watcher"
	// FieldOwner is the server-side apply field manager, in the KCP and in
	// every SKR.
	FieldOwner = "vs-controller"
	// ControllerName names the controller (logs, metrics).
	ControllerName = "runtime-skr-bundle"
	// DefaultKymaNamespace is where Kyma CRs, kubeconfig Secrets and
	// Certificates live.
	DefaultKymaNamespace = "kcp-system"

	// KubeconfigSecretPrefix + runtime ID names a runtime's kubeconfig
	// Secret.
	KubeconfigSecretPrefix = "kubeconfig-"
	// KubeconfigKey is the kubeconfig's key in that Secret.
	KubeconfigKey = "config"
	// CertificateSuffix: runtime ID + CertificateSuffix names the runtime's
	// Certificate and its Secret.
	CertificateSuffix = "-webhook-tls"

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
	maxCommonNameLength     = 64
	defaultWorkers          = 8
	defaultResync           = 10 * time.Minute
	defaultWatcherDebunce   = time.Second
	// maxCachedWebhookConfigs bounds the cache of built webhook
	// configurations (one per CA in use).
	maxCachedWebhookConfigs = 16
)

var (
	kymaGVK       = v1beta2.KymaGroupVersionKind
	certGVK       = certmanagerv1.SchemeGroupVersion.WithKind("Certificate")
	namespaceGVK  = corev1.SchemeGroupVersion.WithKind("Namespace")
	secretGVK     = corev1.SchemeGroupVersion.WithKind("Secret")
	serviceGVK    = corev1.SchemeGroupVersion.WithKind("Service")
	deploymentGVK = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	vwcGVK        = schema.GroupVersionKind{Group: "admissionregistration.k8s.io", Version: "v1", Kind: "ValidatingWebhookConfiguration"}
)

// Reconciler keeps each runtime's Certificate and SKR bundle.
type Reconciler struct {
	// Client of the KCP (the manager's cached client).
	Client   client.Client
	Recorder record.EventRecorder
	// Clients gives the runtime clusters' clients.
	Clients ClusterClients
	// KymaNamespace holds the Kymas, kubeconfig Secrets and Certificates.
	KymaNamespace string
	// Issuer signs the Certificates.
	Issuer cmmeta.IssuerReference
	// ExtraDNSNames are added to every Certificate (local/testing aid, e.g.
	// "localhost" when the skr-webhook runs as a local process).
	ExtraDNSNames []string
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

	memo     apply.Memo
	vwcMu    sync.Mutex
	vwcCache map[string]*unstructured.Unstructured
}

// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=kymas,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=kymas/finalizers,verbs=update
// +kubebuilder:rbac:groups=operator.kyma-project.io,resources=watchers,verbs=get;list;watch
// +kubebuilder:rbac:groups=cert-manager.io,namespace=kcp-system,resources=certificates,verbs=get;list;watch;create;patch;delete
// +kubebuilder:rbac:groups="",namespace=kcp-system,resources=secrets,verbs=get;list;watch;delete
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// NewKyma is an empty Kyma for metadata-only reads (identity.NewKyma).
func NewKyma() *metav1.PartialObjectMetadata { return identity.NewKyma() }

func newKymaList() *metav1.PartialObjectMetadataList { return identity.NewKymaList() }

// RuntimeID of a Kyma: identity.RuntimeIDOf, its label
// kyma-project.io/runtime-id, else its name.
func RuntimeID(kyma client.Object) string { return identity.RuntimeIDOf(kyma) }

// KubeconfigSecretName is the name of a runtime's kubeconfig Secret.
func KubeconfigSecretName(runtimeID string) string { return KubeconfigSecretPrefix + runtimeID }

// CertificateName is the name of a runtime's Certificate and its Secret.
func CertificateName(runtimeID string) string { return runtimeID + CertificateSuffix }

// SetupWithManager registers the controller and an index of Kymas by
// runtime ID.
func (r *Reconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.KymaNamespace == "" {
		r.KymaNamespace = DefaultKymaNamespace
	}
	if r.Clients == nil {
		r.Clients = &KubeconfigClients{}
	}
	if r.MaxConcurrentReconciles == 0 {
		r.MaxConcurrentReconciles = defaultWorkers
	}
	if r.WatcherDebounce == 0 {
		r.WatcherDebounce = defaultWatcherDebunce
	}
	if r.Resync == 0 {
		r.Resync = defaultResync
	}
	if err := identity.IndexRuntimeID(ctx, mgr.GetFieldIndexer()); err != nil {
		return err
	}
	inNamespace := predicate.NewPredicateFuncs(func(o client.Object) bool { return o.GetNamespace() == r.KymaNamespace })
	return ctrl.NewControllerManagedBy(mgr).
		Named(ControllerName).
		For(NewKyma(), builder.WithPredicates(inNamespace, predicate.Funcs{UpdateFunc: kymaChanged})).
		// Owns() needs the owner kind in the scheme; the Kyma is read as
		// metadata only, so map the controller reference by hand.
		Watches(&certmanagerv1.Certificate{}, handler.EnqueueRequestsFromMapFunc(kymaOwner), builder.WithPredicates(inNamespace)).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.kymasForSecret), builder.WithPredicates(inNamespace)).
		Watches(&v1beta2.Watcher{}, &allKymas{r: r}, builder.WithPredicates(predicate.Funcs{UpdateFunc: watcherChanged})).
		WithOptions(controller.Options{MaxConcurrentReconciles: r.MaxConcurrentReconciles}).
		Complete(r)
}

// kymaOwner maps a Certificate to the Kyma that controls it.
func kymaOwner(_ context.Context, o client.Object) []reconcile.Request {
	ref := metav1.GetControllerOf(o)
	if ref == nil || ref.Kind != kymaGVK.Kind || ref.APIVersion != kymaGVK.GroupVersion().String() {
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: ref.Name}}}
}

// kymaChanged passes Kyma updates that matter here: deletion, skr-domain,
// runtime ID, our finalizer.
func kymaChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return (o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		o.GetAnnotations()[contract.AnnotationSKRDomain] != n.GetAnnotations()[contract.AnnotationSKRDomain] ||
		RuntimeID(o) != RuntimeID(n) ||
		controllerutil.ContainsFinalizer(o, Finalizer) != controllerutil.ContainsFinalizer(n, Finalizer)
}

// watcherChanged passes Watcher updates that can change a webhook: spec
// (generation), labels (managed-by), deletion.
func watcherChanged(e event.UpdateEvent) bool {
	o, n := e.ObjectOld, e.ObjectNew
	return o.GetGeneration() != n.GetGeneration() ||
		(o.GetDeletionTimestamp() == nil) != (n.GetDeletionTimestamp() == nil) ||
		o.GetLabels()[contract.LabelManagedBy] != n.GetLabels()[contract.LabelManagedBy]
}

// kymasForSecret maps a kubeconfig Secret or a Certificate Secret to the
// Kyma of its runtime, found as identity.NewKymaLookup finds it.
func (r *Reconciler) kymasForSecret(ctx context.Context, s client.Object) []reconcile.Request {
	var id string
	switch name := s.GetName(); {
	case strings.HasPrefix(name, KubeconfigSecretPrefix):
		id = strings.TrimPrefix(name, KubeconfigSecretPrefix)
	case strings.HasSuffix(name, CertificateSuffix):
		id = strings.TrimSuffix(name, CertificateSuffix)
	default:
		return nil
	}
	rt, found, err := identity.NewKymaLookup(r.Client, r.KymaNamespace).LookupRuntime(ctx, id)
	if err != nil || !found {
		if err != nil {
			log.FromContext(ctx).Error(err, "look up the Kyma for a Secret event")
		}
		return nil
	}
	return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: r.KymaNamespace, Name: rt.KymaName}}}
}

// allKymas enqueues every Kyma on a Watcher event, after the debounce delay
// so that a burst of Watcher changes costs one pass per runtime.
type allKymas struct{ r *Reconciler }

func (h *allKymas) enqueue(ctx context.Context, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	list := newKymaList()
	if err := h.r.Client.List(ctx, list, client.InNamespace(h.r.KymaNamespace)); err != nil {
		log.FromContext(ctx).Error(err, "list Kymas for a Watcher event")
		return
	}
	for i := range list.Items {
		req := reconcile.Request{NamespacedName: client.ObjectKeyFromObject(&list.Items[i])}
		if h.r.WatcherDebounce > 0 {
			q.AddAfter(req, h.r.WatcherDebounce)
		} else {
			q.Add(req)
		}
	}
}

func (h *allKymas) Create(ctx context.Context, _ event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Update(ctx context.Context, _ event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Delete(ctx context.Context, _ event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

func (h *allKymas) Generic(ctx context.Context, _ event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
	h.enqueue(ctx, q)
}

// Reconcile brings one runtime's Certificate and SKR bundle up to date.
func (r *Reconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	kyma := NewKyma()
	if err := r.Client.Get(ctx, req.NamespacedName, kyma); err != nil {
		if apierrors.IsNotFound(err) {
			r.forget(req.String())
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	kyma.SetGroupVersionKind(kymaGVK)
	id := RuntimeID(kyma)
	domain := kyma.GetAnnotations()[contract.AnnotationSKRDomain]
	if kyma.GetDeletionTimestamp() != nil || domain == "" {
		// A Kyma without skr-domain is none of our business; if it had
		// one before, its bundle goes.
		return ctrl.Result{}, r.finalize(ctx, kyma)
	}
	if err := validRuntimeID(id); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonInvalidRuntime, err.Error())
		return ctrl.Result{}, nil
	}
	kubeconfig, err := r.kubeconfig(ctx, id)
	if err != nil || kubeconfig == nil {
		// No kubeconfig Secret (yet): its creation triggers the next pass.
		return ctrl.Result{}, err
	}

	if !controllerutil.ContainsFinalizer(kyma, Finalizer) {
		orig := kyma.DeepCopy()
		controllerutil.AddFinalizer(kyma, Finalizer)
		if err := r.Client.Patch(ctx, kyma, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
		recordWrite("kyma-finalizer")
		kyma.SetGroupVersionKind(kymaGVK)
	}

	if err := r.ensureCertificate(ctx, kyma, id, domain); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonCertificate, err.Error())
		return ctrl.Result{}, err
	}
	tls, err := r.certificateSecret(ctx, id)
	if err != nil || tls == nil {
		// Not issued yet: the Secret's creation triggers the next pass.
		return ctrl.Result{}, err
	}

	skr, err := r.Clients.For(ctx, req.String(), kubeconfig)
	if err != nil {
		// A kubeconfig we refuse or cannot parse: retrying does not help,
		// a change of its Secret triggers the next pass.
		r.event(kyma, corev1.EventTypeWarning, ReasonInvalidKubeconfig, err.Error())
		outcomes.WithLabelValues("invalid-kubeconfig").Inc()
		return ctrl.Result{}, nil
	}
	wrote, err := r.applyBundle(ctx, req.String(), skr, tls)
	if err != nil {
		reason := ReasonBundleFailed
		if isUnreachable(err) {
			reason = ReasonUnreachable
			outcomes.WithLabelValues("unreachable").Inc()
		} else {
			outcomes.WithLabelValues("failed").Inc()
		}
		r.event(kyma, corev1.EventTypeWarning, reason, err.Error())
		return ctrl.Result{}, err
	}
	if wrote > 0 {
		outcomes.WithLabelValues("applied").Inc()
		r.event(kyma, corev1.EventTypeNormal, ReasonBundleApplied, fmt.Sprintf("applied %d object(s) of the SKR bundle", wrote))
	} else {
		outcomes.WithLabelValues("unchanged").Inc()
	}
	if r.Resync > 0 {
		return ctrl.Result{RequeueAfter: r.Resync}, nil
	}
	return ctrl.Result{}, nil
}

func validRuntimeID(id string) error {
	if errs := validation.IsDNS1123Subdomain(CertificateName(id)); len(errs) > 0 || len(id) > maxCommonNameLength {
		return fmt.Errorf("runtime ID %q cannot name a certificate: it must be a DNS-1123 subdomain of at most %d characters", id, maxCommonNameLength)
	}
	return nil
}

// kubeconfig returns the runtime's kubeconfig, or nil when its Secret does
// not exist.
func (r *Reconciler) kubeconfig(ctx context.Context, id string) ([]byte, error) {
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.KymaNamespace, Name: KubeconfigSecretName(id)}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return s.Data[KubeconfigKey], nil
}

type tlsData struct{ ca, cert, key []byte }

// certificateSecret returns the issued certificate, or nil when its Secret
// does not exist or is incomplete.
func (r *Reconciler) certificateSecret(ctx context.Context, id string) (*tlsData, error) {
	s := &corev1.Secret{}
	err := r.Client.Get(ctx, client.ObjectKey{Namespace: r.KymaNamespace, Name: CertificateName(id)}, s)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	t := &tlsData{ca: s.Data[bundle.KeyCA], cert: s.Data[bundle.KeyCert], key: s.Data[bundle.KeyKey]}
	if len(t.ca) == 0 || len(t.cert) == 0 || len(t.key) == 0 {
		return nil, nil
	}
	return t, nil
}

// DesiredCertificate is a runtime's Certificate.
func (r *Reconciler) DesiredCertificate(kyma client.Object, id, domain string) *certmanagerv1.Certificate {
	dns := []string{domain}
	seen := map[string]bool{domain: true}
	for _, n := range append(r.Bundle.ServiceDNSNames(), r.ExtraDNSNames...) {
		if n != "" && !seen[n] {
			seen[n] = true
			dns = append(dns, n)
		}
	}
	return &certmanagerv1.Certificate{
		ObjectMeta: metav1.ObjectMeta{
			Name:            CertificateName(id),
			Namespace:       kyma.GetNamespace(),
			OwnerReferences: []metav1.OwnerReference{*metav1.NewControllerRef(kyma, kymaGVK)},
		},
		Spec: certmanagerv1.CertificateSpec{
			CommonName: id,
			DNSNames:   dns,
			SecretName: CertificateName(id),
			IssuerRef:  r.Issuer,
			Usages: []certmanagerv1.KeyUsage{
				certmanagerv1.UsageDigitalSignature, certmanagerv1.UsageKeyEncipherment,
				certmanagerv1.UsageServerAuth, certmanagerv1.UsageClientAuth,
			},
		},
	}
}

func (r *Reconciler) ensureCertificate(ctx context.Context, kyma client.Object, id, domain string) error {
	desired, err := apply.Desired(r.DesiredCertificate(kyma, id, domain), certGVK)
	if err != nil {
		return err
	}
	var live client.Object
	cur := &certmanagerv1.Certificate{}
	switch err := r.Client.Get(ctx, client.ObjectKey{Namespace: kyma.GetNamespace(), Name: CertificateName(id)}, cur); {
	case apierrors.IsNotFound(err):
	case err != nil:
		return err
	default:
		live = cur
	}
	wrote, err := apply.Ensure(ctx, r.Client, FieldOwner, desired, live)
	if wrote {
		recordWrite("certificate")
	}
	return err
}

// desiredBundle is the SKR bundle in apply order.
func (r *Reconciler) desiredBundle(ctx context.Context, tls *tlsData) ([]*unstructured.Unstructured, error) {
	vwc, err := r.desiredWebhookConfiguration(ctx, tls.ca)
	if err != nil {
		return nil, err
	}
	ns, err := bundle.Namespace(r.Bundle)
	if err != nil {
		return nil, err
	}
	svc, err := bundle.Service(r.Bundle)
	if err != nil {
		return nil, err
	}
	dep, err := bundle.Deployment(r.Bundle)
	if err != nil {
		return nil, err
	}
	objs := []struct {
		obj runtime.Object
		gvk schema.GroupVersionKind
	}{
		{ns, namespaceGVK},
		{bundle.Secret(r.Bundle, tls.ca, tls.cert, tls.key), secretGVK},
		{svc, serviceGVK},
		{dep, deploymentGVK},
	}
	out := make([]*unstructured.Unstructured, 0, len(objs)+1)
	for _, o := range objs {
		u, err := apply.Desired(o.obj, o.gvk)
		if err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return append(out, vwc), nil
}

// desiredWebhookConfiguration builds the webhook configuration from all
// Watchers, once per set of Watchers and CA: runtimes signed by the same
// issuer share it. The result is shared and must not be modified.
func (r *Reconciler) desiredWebhookConfiguration(ctx context.Context, caBundle []byte) (*unstructured.Unstructured, error) {
	var watchers v1beta2.WatcherList
	if err := r.Client.List(ctx, &watchers, client.UnsafeDisableDeepCopy); err != nil {
		return nil, err
	}
	// The cache lists in no particular order: fingerprint a sorted list.
	lines := make([]string, 0, len(watchers.Items))
	for i := range watchers.Items {
		w := &watchers.Items[i]
		lines = append(lines, fmt.Sprintf("%s/%s/%s/%d/%s/%t", w.Namespace, w.Name, w.UID, w.Generation, w.Labels[contract.LabelManagedBy], w.DeletionTimestamp != nil))
	}
	sort.Strings(lines)
	h := sha256.New()
	for _, l := range lines {
		h.Write([]byte(l + "\n"))
	}
	h.Write(caBundle)
	key := string(h.Sum(nil))

	r.vwcMu.Lock()
	if u, ok := r.vwcCache[key]; ok {
		r.vwcMu.Unlock()
		return u, nil
	}
	r.vwcMu.Unlock()

	u, err := apply.Desired(bundle.WebhookConfiguration(r.Bundle, watchers.Items, caBundle), vwcGVK)
	if err != nil {
		return nil, err
	}
	r.vwcMu.Lock()
	defer r.vwcMu.Unlock()
	if r.vwcCache == nil || len(r.vwcCache) >= maxCachedWebhookConfigs {
		r.vwcCache = map[string]*unstructured.Unstructured{}
	}
	r.vwcCache[key] = u
	return u, nil
}

// applyBundle writes the bundle objects that differ from the SKR's and
// returns how many it wrote. An object known to be up to date at its
// current resourceVersion costs one metadata read; others are read in full
// and compared.
func (r *Reconciler) applyBundle(ctx context.Context, runtimeKey string, skr client.Client, tls *tlsData) (int, error) {
	objs, err := r.desiredBundle(ctx, tls)
	if err != nil {
		return 0, err
	}
	wrote := 0
	for _, desired := range objs {
		key := client.ObjectKeyFromObject(desired)
		memoKey := runtimeKey + "|" + desired.GetKind() + "|" + key.String()
		hash := desired.GetAnnotations()[apply.HashAnnotation]
		readErr := func(err error) error {
			return fmt.Errorf("read %s %s in the runtime: %w", desired.GetKind(), key, err)
		}

		var live client.Object
		meta := &metav1.PartialObjectMetadata{}
		meta.SetGroupVersionKind(desired.GroupVersionKind())
		switch err := skr.Get(ctx, key, meta); {
		case apierrors.IsNotFound(err):
		case err != nil:
			return wrote, readErr(err)
		case r.memo.Known(memoKey, meta.GetResourceVersion(), hash):
			continue
		default:
			full := &unstructured.Unstructured{}
			full.SetGroupVersionKind(desired.GroupVersionKind())
			if err := skr.Get(ctx, key, full); err != nil && !apierrors.IsNotFound(err) {
				return wrote, readErr(err)
			} else if err == nil {
				live = full
			}
		}
		ok, err := apply.UpToDate(desired, live)
		if err != nil {
			return wrote, err
		}
		if ok {
			r.memo.Record(memoKey, live.GetResourceVersion(), hash)
			continue
		}
		rv, err := apply.Apply(ctx, skr, FieldOwner, desired)
		if err != nil {
			return wrote, err
		}
		r.memo.Record(memoKey, rv, hash)
		wrote++
		recordWrite("skr-" + strings.ToLower(desired.GetKind()))
	}
	return wrote, nil
}

// finalize removes the SKR bundle (when the kubeconfig Secret still exists;
// without it the cluster is considered gone), the Certificate and its
// Secret, then the finalizer.
func (r *Reconciler) finalize(ctx context.Context, kyma *metav1.PartialObjectMetadata) error {
	if !controllerutil.ContainsFinalizer(kyma, Finalizer) {
		return nil
	}
	id := RuntimeID(kyma)
	key := client.ObjectKeyFromObject(kyma).String()
	kubeconfig, err := r.kubeconfig(ctx, id)
	if err != nil {
		return err
	}
	var skr client.Client
	if kubeconfig == nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonBundleLeft,
			fmt.Sprintf("kubeconfig Secret %s/%s is gone: the SKR bundle cannot be removed from the runtime", r.KymaNamespace, KubeconfigSecretName(id)))
	} else if skr, err = r.Clients.For(ctx, key, kubeconfig); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonBundleLeft,
			fmt.Sprintf("kubeconfig Secret %s/%s is unusable (%v): the SKR bundle cannot be removed from the runtime", r.KymaNamespace, KubeconfigSecretName(id), err))
	} else {
		if err := r.removeBundle(ctx, skr); err != nil {
			r.event(kyma, corev1.EventTypeWarning, ReasonCleanupFailed, err.Error())
			return err
		}
		r.event(kyma, corev1.EventTypeNormal, ReasonBundleRemoved, "removed the SKR bundle from the runtime")
	}
	for _, obj := range []client.Object{
		&certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kyma.GetNamespace(), Name: CertificateName(id)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kyma.GetNamespace(), Name: CertificateName(id)}},
	} {
		if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			r.event(kyma, corev1.EventTypeWarning, ReasonCleanupFailed, err.Error())
			return err
		} else if err == nil {
			recordWrite("cleanup-delete")
		}
	}
	orig := kyma.DeepCopy()
	controllerutil.RemoveFinalizer(kyma, Finalizer)
	if err := r.Client.Patch(ctx, kyma, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	recordWrite("kyma-finalizer")
	r.forget(key)
	outcomes.WithLabelValues("removed").Inc()
	return nil
}

// removeBundle deletes, in the runtime, the bundle objects vs-controller
// applied (those carrying its hash annotation): the webhook configuration
// first so the API server stops calling, then the Deployment, Service and
// Secret. The namespace stays (it is shared).
func (r *Reconciler) removeBundle(ctx context.Context, skr client.Client) error {
	ns := r.Bundle.Namespace
	if ns == "" {
		ns = bundle.DefaultNamespace
	}
	for _, t := range []struct {
		gvk schema.GroupVersionKind
		key client.ObjectKey
	}{
		{vwcGVK, client.ObjectKey{Name: bundle.Name}},
		{deploymentGVK, client.ObjectKey{Namespace: ns, Name: bundle.Name}},
		{serviceGVK, client.ObjectKey{Namespace: ns, Name: bundle.Name}},
		{secretGVK, client.ObjectKey{Namespace: ns, Name: bundle.SecretName}},
	} {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(t.gvk)
		if err := skr.Get(ctx, t.key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("read %s %s in the runtime: %w", t.gvk.Kind, t.key, err)
		}
		if _, ours := obj.GetAnnotations()[apply.HashAnnotation]; !ours {
			continue
		}
		uid := obj.GetUID()
		if err := skr.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s %s in the runtime: %w", t.gvk.Kind, t.key, err)
		}
		recordWrite("skr-delete")
	}
	return nil
}

func (r *Reconciler) forget(runtimeKey string) {
	r.Clients.Forget(runtimeKey)
	r.memo.ForgetPrefix(runtimeKey + "|")
}

func (r *Reconciler) event(kyma runtime.Object, typ, reason, msg string) {
	if r.Recorder != nil {
		r.Recorder.Event(kyma, typ, reason, msg)
	}
}

// isUnreachable tells network and timeout failures from API errors.
func isUnreachable(err error) bool {
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err)
	}
	return true
}
