// Package fakecluster is the fake-cluster tier's one harness: a KCP or a
// runtime (SKR) cluster in memory for reconciler tests that need no API
// server (go test -short). It is controller-runtime's fake client
// (sigs.k8s.io/controller-runtime/pkg/client/fake) set up the way the
// project's reconcilers need it, after the models of cert-manager's
// pkg/controller/test and Istio's pilot/pkg/xds/fake.go (one builder for
// every test, faults injected per call):
//
//   - a REST mapper for every kind of the scheme (cluster-scoped kinds as
//     the API server has them) and for the unstructured custom resources a
//     test declares (WithKinds), so IsObjectNamespaced and unstructured
//     reads work as against an API server;
//   - the status subresource for every kind of the scheme that has a
//     status, and for the kinds named by WithStatus (the Kyma, which the
//     project reads unstructured);
//   - server-side apply (the fake client's field-managed tracker), with
//     managed fields returned as the API server returns them;
//   - faults: Fail makes calls of a verb on a kind (and name) fail with an
//     error — a conflict, a refusal, an unreachable runtime — once, n
//     times or always;
//   - a record of every write (Writes, Count) and a count of reads
//     (Reads, Lists), so a test can say "this pass wrote nothing" or "read each
//     object once";
//   - a strict mode (ExpectNoWrites): every write a test did not name fails
//     the test, with the verb, kind and key of the write, and is refused;
//   - around it: Runtimes (a skrclient.ClusterClients of fake runtimes),
//     Managers (controller-runtime managers over a fake cluster, for the
//     binaries' assembly), kubeconfig Secrets and Kymas (AddKyma, Kyma;
//     a Kyma has its status subresource).
//
// test/memskr is the other stand-in: many runtimes in little memory for
// the benchmarks, with fewer semantics; this one is for correctness.
//
// What it does not do (the integration tier, against real API servers,
// covers these): admission, defaulting and validation, garbage collection,
// field selectors beyond the indexes a test registers, List pagination, UID
// preconditions, managed fields sent with an Update (the fake client keeps
// the stored object's).
package fakecluster

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"reflect"
	"sync"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/managedfields"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/applyconfigurations"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"
	"sigs.k8s.io/structured-merge-diff/v6/typed"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// Verbs of Fail, Count and Write.
const (
	Get          = "get"
	List         = "list"
	Create       = "create"
	Update       = "update"
	Patch        = "patch"
	Apply        = "apply"
	Delete       = "delete"
	DeleteAllOf  = "deleteallof"
	StatusUpdate = "status-update" // an update of any subresource
	StatusPatch  = "status-patch"  // a patch of any subresource
	StatusApply  = "status-apply"  // an apply of any subresource
	// SubResourceCreate is a create of a subresource (an eviction, a
	// token request).
	SubResourceCreate = "subresource-create"
)

// clusterScoped are the kinds of the API server that are not namespaced,
// of the groups the project uses.
var clusterScoped = map[schema.GroupKind]bool{
	{Kind: "Namespace"}: true, {Kind: "Node"}: true, {Kind: "PersistentVolume"}: true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRole"}:                         true,
	{Group: "rbac.authorization.k8s.io", Kind: "ClusterRoleBinding"}:                  true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingWebhookConfiguration"}:   true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingWebhookConfiguration"}:     true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicy"}:        true,
	{Group: "admissionregistration.k8s.io", Kind: "ValidatingAdmissionPolicyBinding"}: true,
	{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"}:                 true,
	{Group: "scheduling.k8s.io", Kind: "PriorityClass"}:                               true,
	{Group: "storage.k8s.io", Kind: "StorageClass"}:                                   true,
	{Group: "cert-manager.io", Kind: "ClusterIssuer"}:                                 true,
	{Group: "certificates.k8s.io", Kind: "CertificateSigningRequest"}:                 true,
	{Group: "apiregistration.k8s.io", Kind: "APIService"}:                             true,
	{Group: "networking.k8s.io", Kind: "IngressClass"}:                                true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "FlowSchema"}:                       true,
	{Group: "flowcontrol.apiserver.k8s.io", Kind: "PriorityLevelConfiguration"}:       true,
	{Group: "authorization.k8s.io", Kind: "SubjectAccessReview"}:                      true,
	{Group: "authorization.k8s.io", Kind: "SelfSubjectAccessReview"}:                  true,
	{Group: "authentication.k8s.io", Kind: "TokenReview"}:                             true,
	{Group: "node.k8s.io", Kind: "RuntimeClass"}:                                      true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicy"}:          true,
	{Group: "admissionregistration.k8s.io", Kind: "MutatingAdmissionPolicyBinding"}:   true,
	{Group: "resource.k8s.io", Kind: "DeviceClass"}:                                   true,
	{Group: "storage.k8s.io", Kind: "CSIDriver"}:                                      true,
	{Group: "storage.k8s.io", Kind: "CSINode"}:                                        true,
	{Group: "storage.k8s.io", Kind: "VolumeAttachment"}:                               true,
	{Group: "networking.k8s.io", Kind: "IPAddress"}:                                   true,
	{Group: "networking.k8s.io", Kind: "ServiceCIDR"}:                                 true,
	{Group: "certificates.k8s.io", Kind: "ClusterTrustBundle"}:                        true,
	{Group: "apiserverinternal.k8s.io", Kind: "StorageVersion"}:                       true,
}

// Option configures New.
type Option func(*config)

type config struct {
	objs     []client.Object
	kinds    map[schema.GroupVersionKind]bool
	status   []client.Object
	indexers []func(context.Context, client.FieldIndexer) error
}

type index struct {
	obj   client.Object
	field string
	fn    client.IndexerFunc
}

// WithObjects puts objs in the cluster before the test starts.
func WithObjects(objs ...client.Object) Option {
	return func(c *config) { c.objs = append(c.objs, objs...) }
}

// WithKinds declares kinds the scheme does not know (custom resources read
// and written as unstructured objects; true: cluster-scoped), as a CRD
// would in a real cluster.
func WithKinds(kinds map[schema.GroupVersionKind]bool) Option {
	return func(c *config) {
		if c.kinds == nil {
			c.kinds = map[schema.GroupVersionKind]bool{}
		}
		for k, v := range kinds {
			c.kinds[k] = v
		}
	}
}

// WithStatus gives objs' kinds a status subresource (kinds the scheme holds
// as unstructured, such as the Kyma; typed kinds with a Status field get
// one anyway).
func WithStatus(objs ...client.Object) Option {
	return func(c *config) { c.status = append(c.status, objs...) }
}

// WithIndexer registers the field indexes register registers (the
// product's own index functions, e.g. identity.IndexRuntimeID), as a
// controller-runtime cache has them (client.MatchingFields on lists).
func WithIndexer(register func(context.Context, client.FieldIndexer) error) Option {
	return func(c *config) { c.indexers = append(c.indexers, register) }
}

// indexRecorder is a client.FieldIndexer that keeps what is registered.
type indexRecorder struct{ indexes []index }

func (r *indexRecorder) IndexField(_ context.Context, obj client.Object, field string, fn client.IndexerFunc) error {
	r.indexes = append(r.indexes, index{obj, field, fn})
	return nil
}

// Cluster is one cluster in memory; its embedded client is what the code
// under test gets.
type Cluster struct {
	client.WithWatch
	scheme *runtime.Scheme
	mapper *meta.DefaultRESTMapper

	mu     sync.Mutex
	faults []*fault
	writes []Write
	reads  map[string]int // kind -> Gets, "list <kind>" -> Lists answered
	strict *strictWindow  // nil: every write is accepted
}

// Write is one write the cluster accepted. For a DeleteAllOf, Name is ""
// and Namespace the namespace of the call's options.
type Write struct {
	Verb, Kind, Namespace, Name string
}

type fault struct {
	verb, kind, name string
	err              error
	left             int // < 0: forever
}

// New is a cluster with scheme's kinds and the options'.
func New(tb testing.TB, scheme *runtime.Scheme, opts ...Option) *Cluster {
	tb.Helper()
	cfg := &config{}
	for _, o := range opts {
		o(cfg)
	}
	// Default versions, for mappings of a kind without a version: the
	// scheme's priority first, then the declared kinds'.
	gvs := scheme.PrioritizedVersionsAllGroups()
	for gvk := range cfg.kinds {
		gvs = append(gvs, gvk.GroupVersion())
	}
	mapper := meta.NewDefaultRESTMapper(gvs)
	for gvk := range scheme.AllKnownTypes() {
		mapper.Add(gvk, scope(clusterScoped[gvk.GroupKind()]))
	}
	for gvk, cs := range cfg.kinds {
		mapper.Add(gvk, scope(cs))
	}
	if scheme.Recognizes(v1beta2.KymaGroupVersionKind) {
		kyma := &unstructured.Unstructured{}
		kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		cfg.status = append(cfg.status, kyma)
	}
	rec := &indexRecorder{}
	for _, register := range cfg.indexers {
		if err := register(context.Background(), rec); err != nil {
			tb.Fatalf("fakecluster: index: %v", err)
		}
	}
	c := &Cluster{scheme: scheme, mapper: mapper}
	b := fake.NewClientBuilder().WithScheme(scheme).WithRESTMapper(mapper).WithTypeConverters(typeConverters()...).WithReturnManagedFields().
		WithStatusSubresource(withStatus(scheme)...).WithStatusSubresource(cfg.status...).
		WithObjects(cfg.objs...).WithInterceptorFuncs(c.interceptor())
	for _, ix := range rec.indexes {
		b = b.WithIndex(ix.obj, ix.field, ix.fn)
	}
	c.WithWatch = b.Build()
	return c
}

// Serve makes the cluster serve a kind it did not (a CRD installed while
// the test runs); not safe while other goroutines use the cluster.
func (c *Cluster) Serve(gvk schema.GroupVersionKind, clusterScoped bool) {
	c.mapper.Add(gvk, scope(clusterScoped))
}

// typeConverters are the fake client's own (client-go's schema, then
// types deduced from the object) with one repair: the fake client believes
// NetworkPolicy has a status subresource (it had one in Kubernetes 1.24 to
// 1.27) and adds "status": null to every apply of one, which client-go's
// schema refuses; the deduced types then do not merge with the stored
// object's ("expected objects with types from the same schema"). A null
// status is dropped before the conversion.
func typeConverters() []managedfields.TypeConverter {
	s := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(s))
	return []managedfields.TypeConverter{nullStatus{applyconfigurations.NewTypeConverter(s)}, managedfields.NewDeducedTypeConverter()}
}

type nullStatus struct{ managedfields.TypeConverter }

func (c nullStatus) ObjectToTyped(obj runtime.Object, opts ...typed.ValidationOptions) (*typed.TypedValue, error) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if v, has := u.Object["status"]; has && v == nil {
			u = u.DeepCopy()
			delete(u.Object, "status")
			obj = u
		}
	}
	return c.TypeConverter.ObjectToTyped(obj, opts...)
}

func scope(clusterScoped bool) meta.RESTScope {
	if clusterScoped {
		return meta.RESTScopeRoot
	}
	return meta.RESTScopeNamespace
}

// withStatus is an object of every typed kind of scheme with a Status
// field, except the kinds the fake client already knows.
func withStatus(scheme *runtime.Scheme) []client.Object {
	var out []client.Object
	for gvk, t := range scheme.AllKnownTypes() {
		if gvk.Group == "" || isBuiltin(gvk.Group) {
			continue // the fake client knows the API server's own kinds
		}
		if t.Kind() != reflect.Struct {
			continue
		}
		if _, ok := t.FieldByName("Status"); !ok {
			continue
		}
		if _, ok := t.FieldByName("Items"); ok {
			continue
		}
		obj, ok := reflect.New(t).Interface().(client.Object)
		if !ok {
			continue
		}
		obj.GetObjectKind().SetGroupVersionKind(gvk)
		out = append(out, obj)
	}
	return out
}

func isBuiltin(group string) bool {
	switch group {
	case "apps", "batch", "autoscaling", "policy", "networking.k8s.io", "rbac.authorization.k8s.io",
		"admissionregistration.k8s.io", "apiextensions.k8s.io", "scheduling.k8s.io", "storage.k8s.io",
		"certificates.k8s.io", "coordination.k8s.io", "discovery.k8s.io", "events.k8s.io", "node.k8s.io",
		"flowcontrol.apiserver.k8s.io", "authentication.k8s.io", "authorization.k8s.io",
		"apiserverinternal.k8s.io", "resource.k8s.io", "storagemigration.k8s.io":
		return true
	}
	return false
}

// Fail makes the next n calls of verb on kind fail with err (n < 0: every
// call); name "" matches every object, otherwise only the object of that
// name. For List, name is ignored. Faults are checked in the order they
// were added; the first that matches answers.
func (c *Cluster) Fail(verb, kind, name string, err error, n int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = append(c.faults, &fault{verb: verb, kind: kind, name: name, err: err, left: n})
}

// Heal removes every fault.
func (c *Cluster) Heal() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.faults = nil
}

// Writes are the writes the cluster accepted, in order.
func (c *Cluster) Writes() []Write {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Write(nil), c.writes...)
}

// Count is the number of accepted writes of verb on kind ("" matches any).
func (c *Cluster) Count(verb, kind string) int {
	n := 0
	for _, w := range c.Writes() {
		if (verb == "" || w.Verb == verb) && (kind == "" || w.Kind == kind) {
			n++
		}
	}
	return n
}

// Reads is the number of Gets of kind the cluster answered.
func (c *Cluster) Reads(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[kind]
}

// Lists is the number of Lists of kind the cluster answered.
func (c *Cluster) Lists(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.reads[List+" "+kind]
}

func (c *Cluster) countRead(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.reads == nil {
		c.reads = map[string]int{}
	}
	c.reads[key]++
}

// Reset forgets the writes and reads recorded so far.
func (c *Cluster) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes, c.reads = nil, nil
}

// Conflict is the API server's answer to a write with a stale
// resourceVersion.
func Conflict(kind, name string) error {
	return apierrors.NewConflict(schema.GroupResource{Resource: kind}, name, errors.New("the object has been modified; please apply your changes to the latest version and try again"))
}

// ErrUnreachable is what a client sees when the cluster does not answer: a
// transport error, no API status.
var ErrUnreachable error = &url.Error{Op: "Get", URL: "https://runtime.example:6443", Err: errors.New("dial tcp 192.0.2.1:6443: connect: connection refused")}

func (c *Cluster) check(verb string, obj runtime.Object, name string) error {
	kind := c.kindOf(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, f := range c.faults {
		if f.left == 0 || f.verb != verb || f.kind != kind || (f.name != "" && verb != List && f.name != name) {
			continue
		}
		if f.left > 0 {
			f.left--
		}
		return f.err
	}
	return nil
}

func (c *Cluster) record(verb string, obj runtime.Object, namespace, name string) {
	kind := c.kindOf(obj)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes = append(c.writes, Write{Verb: verb, Kind: kind, Namespace: namespace, Name: name})
}

// gvkOf is obj's group, version and kind: its own, else the scheme's.
func (c *Cluster) gvkOf(obj runtime.Object) schema.GroupVersionKind {
	gvk := obj.GetObjectKind().GroupVersionKind()
	if gvk.Kind == "" {
		if k, err := apiutil.GVKForObject(obj, c.scheme); err == nil {
			gvk = k
		}
	}
	return gvk
}

// kindOf is obj's kind ("Foo" for a FooList).
func (c *Cluster) kindOf(obj runtime.Object) string {
	gvk := c.gvkOf(obj)
	if _, isList := obj.(client.ObjectList); isList && len(gvk.Kind) > 4 && gvk.Kind[len(gvk.Kind)-4:] == "List" {
		return gvk.Kind[:len(gvk.Kind)-4]
	}
	return gvk.Kind
}

// applied is the object of an apply configuration, for its kind and name.
func applied(ac runtime.ApplyConfiguration) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ac)
	if err != nil {
		return nil, fmt.Errorf("fakecluster: apply configuration %T: %w", ac, err)
	}
	return &unstructured.Unstructured{Object: m}, nil
}

func (c *Cluster) interceptor() interceptor.Funcs {
	return interceptor.Funcs{
		Get: func(ctx context.Context, cl client.WithWatch, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
			if err := c.check(Get, obj, key.Name); err != nil {
				return err
			}
			c.countRead(c.kindOf(obj))
			if err := cl.Get(ctx, key, obj, opts...); err != nil {
				return err
			}
			dropNullStatus(obj)
			return nil
		},
		List: func(ctx context.Context, cl client.WithWatch, list client.ObjectList, opts ...client.ListOption) error {
			if err := c.check(List, list, ""); err != nil {
				return err
			}
			c.countRead(List + " " + c.kindOf(list))
			if err := cl.List(ctx, list, opts...); err != nil {
				return err
			}
			if u, ok := list.(*unstructured.UnstructuredList); ok {
				for i := range u.Items {
					dropNullStatus(&u.Items[i])
				}
			}
			return nil
		},
		Create: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.CreateOption) error {
			if !dryRun(opts) {
				if err := c.expected(Create, obj, obj.GetNamespace(), obj.GetName()); err != nil {
					return err
				}
			}
			if err := c.check(Create, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.Create(ctx, obj, opts...); err != nil {
				return err
			}
			if !dryRun(opts) {
				c.record(Create, obj, obj.GetNamespace(), obj.GetName())
			}
			return nil
		},
		Update: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.UpdateOption) error {
			if err := c.expected(Update, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(Update, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.Update(ctx, obj, opts...); err != nil {
				return err
			}
			c.record(Update, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		Patch: func(ctx context.Context, cl client.WithWatch, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
			if err := c.expected(Patch, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(Patch, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			c.record(Patch, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		Apply: func(ctx context.Context, cl client.WithWatch, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
			u, err := applied(ac)
			if err != nil {
				return err
			}
			if err := c.expected(Apply, u, u.GetNamespace(), u.GetName()); err != nil {
				return err
			}
			if err := c.check(Apply, u, u.GetName()); err != nil {
				return err
			}
			if err := cl.Apply(ctx, ac, opts...); err != nil {
				return err
			}
			c.record(Apply, u, u.GetNamespace(), u.GetName())
			return nil
		},
		Delete: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteOption) error {
			if err := c.expected(Delete, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(Delete, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.Delete(ctx, obj, opts...); err != nil {
				return err
			}
			c.record(Delete, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		SubResourceUpdate: func(ctx context.Context, cl client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
			if err := c.expected(StatusUpdate, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(StatusUpdate, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.SubResource(sub).Update(ctx, obj, opts...); err != nil {
				return err
			}
			c.record(StatusUpdate, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		SubResourcePatch: func(ctx context.Context, cl client.Client, sub string, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
			if err := c.expected(StatusPatch, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(StatusPatch, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.SubResource(sub).Patch(ctx, obj, patch, opts...); err != nil {
				return err
			}
			c.record(StatusPatch, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		DeleteAllOf: func(ctx context.Context, cl client.WithWatch, obj client.Object, opts ...client.DeleteAllOfOption) error {
			o := &client.DeleteAllOfOptions{}
			o.ApplyOptions(opts)
			if err := c.expected(DeleteAllOf, obj, o.Namespace, ""); err != nil {
				return err
			}
			if err := c.check(DeleteAllOf, obj, ""); err != nil {
				return err
			}
			if err := cl.DeleteAllOf(ctx, obj, opts...); err != nil {
				return err
			}
			c.record(DeleteAllOf, obj, o.Namespace, "")
			return nil
		},
		SubResourceCreate: func(ctx context.Context, cl client.Client, sub string, obj, subObj client.Object, opts ...client.SubResourceCreateOption) error {
			if err := c.expected(SubResourceCreate, obj, obj.GetNamespace(), obj.GetName()); err != nil {
				return err
			}
			if err := c.check(SubResourceCreate, obj, obj.GetName()); err != nil {
				return err
			}
			if err := cl.SubResource(sub).Create(ctx, obj, subObj, opts...); err != nil {
				return err
			}
			c.record(SubResourceCreate, obj, obj.GetNamespace(), obj.GetName())
			return nil
		},
		SubResourceApply: func(ctx context.Context, cl client.Client, sub string, ac runtime.ApplyConfiguration, opts ...client.SubResourceApplyOption) error {
			u, err := applied(ac)
			if err != nil {
				return err
			}
			if err := c.expected(StatusApply, u, u.GetNamespace(), u.GetName()); err != nil {
				return err
			}
			if err := c.check(StatusApply, u, u.GetName()); err != nil {
				return err
			}
			if err := cl.SubResource(sub).Apply(ctx, ac, opts...); err != nil {
				return err
			}
			c.record(StatusApply, u, u.GetNamespace(), u.GetName())
			return nil
		},
	}
}

// dropNullStatus removes the "status": null the fake client writes into
// unstructured objects of kinds with a status subresource; the API server
// stores no null field.
func dropNullStatus(obj runtime.Object) {
	if u, ok := obj.(*unstructured.Unstructured); ok {
		if v, has := u.Object["status"]; has && v == nil {
			delete(u.Object, "status")
		}
	}
}

func dryRun(opts []client.CreateOption) bool {
	o := &client.CreateOptions{}
	o.ApplyOptions(opts)
	return len(o.DryRun) > 0
}
