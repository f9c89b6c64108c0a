// Command example is an example module manager (docs/architecture.md §4.11): the
// kubebuilder-style KCP operator a module team writes. It reads the
// ModuleConfigs of one module (--module; module-sync mirrors every runtime's
// Module CR into one) and writes, per ModuleConfig, a SyncResource that
// module-sync applies into that runtime:
//
//   - "config" (CreateAndSync): ConfigMap <module>-config with data derived
//     from the Module CR's spec (spec.greeting and the CR's generation);
//   - "workload" (CreateAndSync): Deployment <module>-workload whose replica
//     count is spec.replicas;
//   - "defaults" (CreateAndIgnore): ConfigMap <module>-defaults, created
//     once; the runtime's users may change it afterwards;
//   - "debug" (CreateAndSync, only while spec.debug is true): ConfigMap
//     <module>-debug. Setting spec.debug to false removes the item, and
//     module-sync deletes the ConfigMap from the runtime.
//
// Copy it: replace desiredItems with what your module needs in a runtime.
// Every change of the Module CR in the runtime reaches Reconcile within
// seconds (module-sync's Watcher); module-sync applies the SyncResource at
// once.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/go-logr/logr"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/startup"
	"github.com/seed-c8be168e/runtime-watcher/version"
)

// LabelModuleName on a ModuleConfig names its module (set by module-sync).
const LabelModuleName = "operator.kyma-project.io/module-name"

// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=moduleconfigs,verbs=get;list;watch
// +kubebuilder:rbac:groups=operator.kyma-project.io,namespace=kcp-system,resources=syncresources,verbs=get;list;watch;create;update;delete

// options are the example's flags.
type options struct {
	startup.Common
	metricsAddr, healthAddr, namespace, module, leNamespace string
	leaderElect                                             bool
}

func main() { startup.Main("example", parseOptions, run) }

// parseOptions reads and validates the flags (args without the program
// name). -h and --help print the usage to errOut and return flag.ErrHelp;
// --version returns at once with Version set.
func parseOptions(args []string, errOut io.Writer) (*options, error) {
	o := &options{}
	fs := o.FlagSet("example", "An example module manager: ModuleConfigs of one module -> SyncResources.", errOut)
	// --kubeconfig, read by ctrl.GetConfig.
	ctrlconfig.RegisterFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "address of /metrics (\"0\" disables)")
	fs.StringVar(&o.healthAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz (\"0\" disables)")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "use leader election (one active replica)")
	fs.StringVar(&o.leNamespace, "leader-election-namespace", "", "namespace of the leader election Lease (default: --kyma-namespace)")
	fs.StringVar(&o.namespace, "kyma-namespace", "kcp-system", "namespace of the Kyma CRs, ModuleConfigs and SyncResources")
	fs.StringVar(&o.module, "module", "sample", "the module whose ModuleConfigs this manager reads")
	if err := o.Parse(fs, args); err != nil || o.Version {
		return o, err
	}
	if errs := startup.Collect(nil, startup.DNSLabel("module", o.module), startup.DNSLabel("kyma-namespace", o.namespace)); len(errs) > 0 {
		return nil, errs.ToAggregate()
	}
	if o.leNamespace == "" {
		o.leNamespace = o.namespace
	}
	return o, nil
}

// run runs the module manager until ctx ends.
func run(ctx context.Context, o *options, log logr.Logger) error {
	scheme := k8sruntime.NewScheme()
	for _, add := range []func(*k8sruntime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
		if err := add(scheme); err != nil {
			return err
		}
	}
	cfg, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 metricsserver.Options{BindAddress: o.metricsAddr},
		HealthProbeBindAddress:  o.healthAddr,
		LeaderElection:          o.leaderElect,
		LeaderElectionID:        o.module + "-module-manager.operator.kyma-project.io",
		LeaderElectionNamespace: o.leNamespace,
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{o.namespace: {}}},
		GracefulShutdownTimeout: ptr.To(10 * time.Second),
	})
	if err != nil {
		return err
	}
	// Who this manager is in the KCP: every SyncResource records its
	// writer (manifests/kcp/base/syncresource-writer-policy.yaml).
	direct, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	self := &authenticationv1.SelfSubjectReview{}
	if err := direct.Create(ctx, self); err != nil {
		return fmt.Errorf("who am I (SelfSubjectReview): %w", err)
	}
	if err := setup(mgr, o.module, self.Status.UserInfo.Username); err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	log.Info("starting", "version", version.Get(), "module", o.module, "kymaNamespace", o.namespace)
	return mgr.Start(ctx)
}

func setup(mgr ctrl.Manager, module, writer string) error {
	ofModule, err := predicate.LabelSelectorPredicate(metav1.LabelSelector{MatchLabels: map[string]string{LabelModuleName: module}})
	if err != nil {
		return err
	}
	return ctrl.NewControllerManagedBy(mgr).
		Named(module+"-module-manager").
		For(&v1alpha1.ModuleConfig{}, builder.WithPredicates(ofModule, predicate.GenerationChangedPredicate{})).
		Owns(&v1alpha1.SyncResource{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(&reconciler{client: mgr.GetClient(), module: module, writer: writer})
}

type reconciler struct {
	client client.Client
	module string
	// writer is this manager's KCP user name, recorded on every
	// SyncResource it writes (v1alpha1.AnnotationWrittenBy).
	writer string
}

// moduleSpec is the demo Module CR's spec (manifests/samples/module-sync).
type moduleSpec struct {
	Greeting string `json:"greeting,omitempty"`
	Replicas *int32 `json:"replicas,omitempty"`
	Debug    bool   `json:"debug,omitempty"`
}

// moduleCR is what a ModuleConfig holds of the Module CR.
type moduleCR struct {
	Metadata struct {
		Name       string `json:"name"`
		Namespace  string `json:"namespace"`
		Generation int64  `json:"generation"`
	} `json:"metadata"`
	Spec moduleSpec `json:"spec"`
}

// Reconcile makes the SyncResource of a ModuleConfig (same name and
// namespace, owned by it) hold the items the Module CR asks for; it deletes
// the SyncResource when the ModuleConfig is gone (module-sync then removes
// its objects from the runtime).
func (r *reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	mc := &v1alpha1.ModuleConfig{}
	if err := r.client.Get(ctx, req.NamespacedName, mc); err != nil {
		if !apierrors.IsNotFound(err) {
			return reconcile.Result{}, err
		}
		// Owner references would let the garbage collector do this; an
		// explicit delete also works where none runs.
		sr := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: req.Name, Namespace: req.Namespace}}
		return reconcile.Result{}, client.IgnoreNotFound(r.client.Delete(ctx, sr))
	}
	if mc.DeletionTimestamp != nil || mc.Labels[LabelModuleName] != r.module {
		return reconcile.Result{}, nil
	}
	var cr moduleCR
	if err := json.Unmarshal(mc.Spec.Resource.Raw, &cr); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "ModuleConfig holds no readable Module CR; waiting for a change")
		return reconcile.Result{}, nil
	}
	items, err := desiredItems(r.module, cr)
	if err != nil {
		return reconcile.Result{}, err
	}
	sr := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: mc.Name, Namespace: mc.Namespace}}
	_, err = controllerutil.CreateOrUpdate(ctx, r.client, sr, func() error {
		sr.Spec.Kyma = mc.Spec.Kyma
		sr.Spec.Module = r.module
		sr.Spec.Items = items
		if sr.Annotations == nil {
			sr.Annotations = map[string]string{}
		}
		sr.Annotations[v1alpha1.AnnotationWrittenBy] = r.writer
		return controllerutil.SetControllerReference(mc, sr, r.client.Scheme())
	})
	return reconcile.Result{}, err
}

// desiredItems is what the module needs in the runtime. Never put a Secret
// here: module-sync refuses it (the KCP copy must not hold sensitive data).
func desiredItems(module string, cr moduleCR) ([]v1alpha1.SyncItem, error) {
	ns := cr.Metadata.Namespace
	if ns == "" {
		ns = "kyma-system"
	}
	labels := map[string]string{"app.kubernetes.io/name": module, "app.kubernetes.io/managed-by": module + "-module-manager"}
	config := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: module + "-config", Namespace: ns, Labels: labels},
		Data: map[string]string{
			"greeting":         cr.Spec.Greeting,
			"moduleGeneration": fmt.Sprint(cr.Metadata.Generation),
		},
	}
	replicas := ptr.Deref(cr.Spec.Replicas, 1)
	workload := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: metav1.ObjectMeta{Name: module + "-workload", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app.kubernetes.io/name": module}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app.kubernetes.io/name": module}},
				// No ServiceAccount token: a module's workloads run as
				// the namespace's default only without one (the
				// runtime's workload policy, docs/security.md).
				Spec: corev1.PodSpec{AutomountServiceAccountToken: ptr.To(false), Containers: []corev1.Container{{
					Name: module, Image: "registry.k8s.io/pause:3.10",
				}}},
			},
		},
	}
	defaults := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: module + "-defaults", Namespace: ns, Labels: labels},
		Data:       map[string]string{"logLevel": "info"},
	}
	items := []v1alpha1.SyncItem{}
	for _, it := range []struct {
		name     string
		strategy v1alpha1.Strategy
		obj      any
	}{
		{"config", v1alpha1.CreateAndSync, config},
		{"workload", v1alpha1.CreateAndSync, workload},
		{"defaults", v1alpha1.CreateAndIgnore, defaults},
	} {
		raw, err := json.Marshal(it.obj)
		if err != nil {
			return nil, err
		}
		items = append(items, v1alpha1.SyncItem{Name: it.name, Strategy: it.strategy, Resource: k8sruntime.RawExtension{Raw: raw}})
	}
	if cr.Spec.Debug {
		raw, err := json.Marshal(&corev1.ConfigMap{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
			ObjectMeta: metav1.ObjectMeta{Name: module + "-debug", Namespace: ns, Labels: labels},
			Data:       map[string]string{"logLevel": "debug"},
		})
		if err != nil {
			return nil, err
		}
		items = append(items, v1alpha1.SyncItem{Name: "debug", Strategy: v1alpha1.CreateAndSync, Resource: k8sruntime.RawExtension{Raw: raw}})
	}
	return items, nil
}
