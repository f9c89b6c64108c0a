// Package memskr is a TEST STAND-IN for the API servers of many runtime
// (SKR) clusters, in memory: one client.Client per runtime, for benchmarks
// with more runtimes than real API servers can run on one machine
// (vs-controller/bench with -vsbench.skr=memory). It replaces one
// kube-apiserver and etcd per runtime, and controller-runtime's fake client,
// which has server-side apply but costs about 300 KiB per runtime holding
// vs-controller's bundle with 100 Watchers (a typed copy and the managed
// fields of every object, nothing shared): 3 GiB for 10,000 runtimes.
//
// What it does, as an API server does for the requests vs-controller sends:
//   - Get of typed, unstructured and metadata-only (PartialObjectMetadata)
//     objects, List of them in a namespace or across the cluster (no label
//     or field selectors), the API server's NotFound, AlreadyExists and
//     Conflict errors;
//   - server-side apply with a required field manager: creates the object
//     or replaces it with what was applied; an apply that changes nothing
//     keeps the resourceVersion (it writes nothing, as the API server); an
//     apply by another field manager than the object's without force is
//     refused with a Conflict;
//   - Create, Update (optimistic lock on a given resourceVersion), Delete
//     with UID and resourceVersion preconditions (a Namespace takes its
//     objects with it, at once);
//   - a namespaced object needs its Namespace (the NamespaceLifecycle
//     admission plugin);
//   - uid, a per-cluster resourceVersion, generation (bumped when anything
//     but metadata changes) and creationTimestamp.
//
// What it does not do: field ownership between managers (an object is what
// its last writer sent, which is what server-side apply gives when one
// manager applies its whole intent, as vs-controller does), defaulting,
// validation, admission webhooks, watches, status subresources, finalizers
// and graceful deletion, Patch, DeleteAllOf, selectors. Those return an
// error wrapping errors.ErrUnsupported.
//
// Memory: an object's body (everything but its metadata) is kept once as
// JSON and shared by every runtime holding the same body — all runtimes
// get the same webhook configuration, Deployment and Service — so a runtime
// costs its objects' metadata and the bodies only it has (its Secret).
package memskr

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"sort"
	"strconv"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// Fleet holds the runtime clusters and the bodies they share.
type Fleet struct {
	scheme *runtime.Scheme
	mapper meta.RESTMapper

	mu       sync.Mutex
	clusters map[string]*Cluster
	bodies   map[[sha256.Size]byte]*body
}

// NewFleet is an empty fleet whose clusters know the kinds of scheme (typed
// objects) and mapper (scope of every kind; other kinds are refused as a
// client with a static REST mapper refuses them).
func NewFleet(scheme *runtime.Scheme, mapper meta.RESTMapper) *Fleet {
	return &Fleet{scheme: scheme, mapper: mapper, clusters: map[string]*Cluster{}, bodies: map[[sha256.Size]byte]*body{}}
}

// Cluster is the runtime cluster called name, created empty on first use.
func (f *Fleet) Cluster(name string) *Cluster {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.clusters[name]
	if !ok {
		c = &Cluster{fleet: f, objs: map[objKey]*stored{}}
		f.clusters[name] = c
	}
	return c
}

// Bodies is the number of distinct object bodies stored.
func (f *Fleet) Bodies() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.bodies)
}

// body is an object without its metadata, as JSON; refs counts the objects
// holding it.
type body struct {
	sum  [sha256.Size]byte
	raw  []byte
	refs int
}

func (f *Fleet) intern(raw []byte) *body {
	sum := sha256.Sum256(raw)
	f.mu.Lock()
	defer f.mu.Unlock()
	b, ok := f.bodies[sum]
	if !ok {
		b = &body{sum: sum, raw: raw}
		f.bodies[sum] = b
	}
	b.refs++
	return b
}

func (f *Fleet) release(b *body) {
	if b == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if b.refs--; b.refs <= 0 {
		delete(f.bodies, b.sum)
	}
}

type objKey struct {
	gk        schema.GroupKind
	namespace string
	name      string
}

// stored is one object; never modified once stored (a write stores a new
// one), so readers need no lock after looking it up.
type stored struct {
	gvk     schema.GroupVersionKind
	meta    metav1.ObjectMeta
	manager string
	body    *body
}

// Cluster is one runtime cluster and its client.
type Cluster struct {
	fleet *Fleet

	mu   sync.Mutex
	rv   uint64
	objs map[objKey]*stored
}

var _ client.Client = (*Cluster)(nil)

// unsupported is the error of what the stand-in does not do (see the
// package comment).
func unsupported(what string) error {
	return fmt.Errorf("memskr: %s: %w", what, errors.ErrUnsupported)
}

// key resolves obj's kind: its scope (a cluster-scoped key has no
// namespace) and resource (for errors).
func (c *Cluster) key(gvk schema.GroupVersionKind, namespace, name string) (objKey, schema.GroupResource, bool, error) {
	m, err := c.fleet.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return objKey{}, schema.GroupResource{}, false, err
	}
	namespaced := m.Scope.Name() == meta.RESTScopeNameNamespace
	if !namespaced {
		namespace = ""
	}
	return objKey{gk: gvk.GroupKind(), namespace: namespace, name: name}, m.Resource.GroupResource(), namespaced, nil
}

func (c *Cluster) gvkOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	return apiutil.GVKForObject(obj, c.fleet.scheme)
}

func (c *Cluster) lookup(k objKey) *stored {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.objs[k]
}

// Get implements client.Reader.
func (c *Cluster) Get(_ context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if len(opts) > 0 {
		return unsupported("get options")
	}
	gvk, err := c.gvkOf(obj)
	if err != nil {
		return err
	}
	k, gr, _, err := c.key(gvk, key.Namespace, key.Name)
	if err != nil {
		return err
	}
	s := c.lookup(k)
	if s == nil {
		return apierrors.NewNotFound(gr, key.Name)
	}
	return s.into(obj)
}

// List implements client.Reader: all objects of the list's kind, in
// ListOptions.Namespace when set.
func (c *Cluster) List(_ context.Context, list client.ObjectList, opts ...client.ListOption) error {
	o := (&client.ListOptions{}).ApplyOptions(opts)
	if o.LabelSelector != nil || o.FieldSelector != nil || o.Limit != 0 || o.Continue != "" {
		return unsupported("list selectors and paging")
	}
	lgvk, err := c.gvkOf(list)
	if err != nil {
		return err
	}
	gvk := lgvk.GroupVersion().WithKind(strings.TrimSuffix(lgvk.Kind, "List"))
	want, _, _, err := c.key(gvk, o.Namespace, "")
	if err != nil {
		return err
	}
	c.mu.Lock()
	var items []*stored
	for k, s := range c.objs {
		if k.gk == want.gk && (want.namespace == "" || k.namespace == want.namespace) {
			items = append(items, s)
		}
	}
	rv := c.rv
	c.mu.Unlock()
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i].meta, items[j].meta
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	if l, ok := list.(*metav1.PartialObjectMetadataList); ok {
		l.ResourceVersion = strconv.FormatUint(rv, 10)
		l.Items = make([]metav1.PartialObjectMetadata, len(items))
		for i, s := range items {
			if err := s.into(&l.Items[i]); err != nil {
				return err
			}
		}
		return nil
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `{"apiVersion":%q,"kind":%q,"metadata":{"resourceVersion":"%d"},"items":[`, lgvk.GroupVersion(), lgvk.Kind, rv)
	for i, s := range items {
		if i > 0 {
			buf.WriteByte(',')
		}
		raw, err := s.json()
		if err != nil {
			return err
		}
		buf.Write(raw)
	}
	buf.WriteString("]}")
	return decodeInto(buf.Bytes(), list)
}

// Apply implements client.Writer: server-side apply (see the package
// comment).
func (c *Cluster) Apply(_ context.Context, ac runtime.ApplyConfiguration, opts ...client.ApplyOption) error {
	o := &client.ApplyOptions{}
	o.ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		return unsupported("dry run")
	}
	if o.FieldManager == "" {
		return apierrors.NewBadRequest("PatchOptions.fieldManager: Required value: is required for apply patch")
	}
	raw, err := json.Marshal(ac)
	if err != nil {
		return err
	}
	u := &unstructured.Unstructured{}
	if err := u.UnmarshalJSON(raw); err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	force := o.Force != nil && *o.Force
	s, err := c.write(u, o.FieldManager, func(old *stored) error {
		if old != nil && old.manager != o.FieldManager && !force {
			return apierrors.NewConflict(schema.GroupResource{Group: u.GroupVersionKind().Group, Resource: u.GetKind()}, u.GetName(),
				fmt.Errorf("Apply failed with 1 conflict: conflict with %q", old.manager))
		}
		return nil
	}, true, true)
	if err != nil {
		return err
	}
	out, err := s.json()
	if err != nil {
		return err
	}
	if us, ok := ac.(interface{ SetUnstructuredContent(map[string]any) }); ok {
		res := &unstructured.Unstructured{}
		if err := res.UnmarshalJSON(out); err != nil {
			return err
		}
		us.SetUnstructuredContent(res.Object)
		return nil
	}
	return json.Unmarshal(out, ac)
}

// Create implements client.Writer.
func (c *Cluster) Create(_ context.Context, obj client.Object, opts ...client.CreateOption) error {
	o := (&client.CreateOptions{}).ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		return unsupported("dry run")
	}
	u, err := c.toUnstructured(obj)
	if err != nil {
		return err
	}
	s, err := c.write(u, o.FieldManager, func(old *stored) error {
		if old != nil {
			return apierrors.NewAlreadyExists(schema.GroupResource{Group: u.GroupVersionKind().Group, Resource: u.GetKind()}, u.GetName())
		}
		return nil
	}, true, false)
	if err != nil {
		return err
	}
	return s.into(obj)
}

// Update implements client.Writer: the object replaces the stored one; a
// resourceVersion in obj must be the stored one's.
func (c *Cluster) Update(_ context.Context, obj client.Object, opts ...client.UpdateOption) error {
	o := (&client.UpdateOptions{}).ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		return unsupported("dry run")
	}
	u, err := c.toUnstructured(obj)
	if err != nil {
		return err
	}
	s, err := c.write(u, o.FieldManager, func(old *stored) error {
		gr := schema.GroupResource{Group: u.GroupVersionKind().Group, Resource: u.GetKind()}
		switch {
		case old == nil:
			return apierrors.NewNotFound(gr, u.GetName())
		case u.GetResourceVersion() != "" && u.GetResourceVersion() != old.meta.ResourceVersion:
			return apierrors.NewConflict(gr, u.GetName(), errors.New("the object has been modified; please apply your changes to the latest version and try again"))
		}
		return nil
	}, false, false)
	if err != nil {
		return err
	}
	return s.into(obj)
}

// write stores u (its labels, annotations and body) under lock after check
// accepts the current object (nil when there is none). create: a missing
// object is created (else NotFound). An empty manager keeps the object's.
// unchangedIsNoop: a write changing nothing keeps the stored object and its
// resourceVersion (apply; create and update always write).
func (c *Cluster) write(u *unstructured.Unstructured, manager string, check func(*stored) error, create, unchangedIsNoop bool) (*stored, error) {
	gvk := u.GroupVersionKind()
	if u.GetName() == "" {
		return nil, apierrors.NewBadRequest("metadata.name: Required value")
	}
	k, gr, namespaced, err := c.key(gvk, u.GetNamespace(), u.GetName())
	if err != nil {
		return nil, err
	}
	content := maps.Clone(u.Object)
	delete(content, "metadata")
	delete(content, "status")
	raw, err := json.Marshal(content) // map keys sorted: equal bodies are equal bytes
	if err != nil {
		return nil, err
	}
	b := c.fleet.intern(raw)

	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.objs[k]
	if err := check(old); err != nil {
		c.fleet.release(b)
		return nil, err
	}
	if old == nil && !create {
		c.fleet.release(b)
		return nil, apierrors.NewNotFound(gr, k.name)
	}
	if namespaced {
		if _, ok := c.objs[objKey{gk: schema.GroupKind{Kind: "Namespace"}, name: k.namespace}]; !ok {
			c.fleet.release(b)
			return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "namespaces"}, k.namespace)
		}
	}
	if manager == "" && old != nil {
		manager = old.manager
	}
	labels, annotations := emptyNil(u.GetLabels()), emptyNil(u.GetAnnotations())
	if old != nil && unchangedIsNoop && old.body == b && old.manager == manager &&
		maps.Equal(old.meta.Labels, labels) && maps.Equal(old.meta.Annotations, annotations) {
		c.fleet.release(b)
		return old, nil
	}
	c.rv++
	s := &stored{gvk: gvk, manager: manager, body: b, meta: metav1.ObjectMeta{
		Name: k.name, Namespace: k.namespace, Labels: labels, Annotations: annotations,
		ResourceVersion: strconv.FormatUint(c.rv, 10), Generation: 1,
	}}
	if old == nil {
		s.meta.UID = uuid.NewUUID()
		s.meta.CreationTimestamp = metav1.Now()
	} else {
		s.meta.UID, s.meta.CreationTimestamp, s.meta.Generation = old.meta.UID, old.meta.CreationTimestamp, old.meta.Generation
		if old.body != b {
			s.meta.Generation++
		}
		c.fleet.release(old.body)
	}
	c.objs[k] = s
	return s, nil
}

// Delete implements client.Writer, with UID and resourceVersion
// preconditions. Deleting a Namespace deletes its objects.
func (c *Cluster) Delete(_ context.Context, obj client.Object, opts ...client.DeleteOption) error {
	o := (&client.DeleteOptions{}).ApplyOptions(opts)
	if len(o.DryRun) > 0 {
		return unsupported("dry run")
	}
	gvk, err := c.gvkOf(obj)
	if err != nil {
		return err
	}
	k, gr, _, err := c.key(gvk, obj.GetNamespace(), obj.GetName())
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.objs[k]
	if s == nil {
		return apierrors.NewNotFound(gr, k.name)
	}
	if p := o.Preconditions; p != nil {
		if p.UID != nil && *p.UID != s.meta.UID {
			return apierrors.NewConflict(gr, k.name, fmt.Errorf("precondition failed: UID in precondition: %s, UID in object meta: %s", *p.UID, s.meta.UID))
		}
		if p.ResourceVersion != nil && *p.ResourceVersion != s.meta.ResourceVersion {
			return apierrors.NewConflict(gr, k.name, fmt.Errorf("precondition failed: ResourceVersion in precondition: %s, ResourceVersion in object meta: %s", *p.ResourceVersion, s.meta.ResourceVersion))
		}
	}
	delete(c.objs, k)
	c.fleet.release(s.body)
	if k.gk == (schema.GroupKind{Kind: "Namespace"}) {
		for ok, os := range c.objs {
			if ok.namespace == k.name {
				delete(c.objs, ok)
				c.fleet.release(os.body)
			}
		}
	}
	c.rv++
	return nil
}

// Patch is not supported.
func (c *Cluster) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	return unsupported("patch")
}

// DeleteAllOf is not supported.
func (c *Cluster) DeleteAllOf(context.Context, client.Object, ...client.DeleteAllOfOption) error {
	return unsupported("deletecollection")
}

// Status is not supported (its writes return errors).
func (c *Cluster) Status() client.SubResourceWriter { return noSubResource{} }

// SubResource is not supported (its requests return errors).
func (c *Cluster) SubResource(string) client.SubResourceClient { return noSubResource{} }

// Scheme implements client.Client.
func (c *Cluster) Scheme() *runtime.Scheme { return c.fleet.scheme }

// RESTMapper implements client.Client.
func (c *Cluster) RESTMapper() meta.RESTMapper { return c.fleet.mapper }

// GroupVersionKindFor implements client.Client.
func (c *Cluster) GroupVersionKindFor(obj runtime.Object) (schema.GroupVersionKind, error) {
	return c.gvkOf(obj)
}

// IsObjectNamespaced implements client.Client.
func (c *Cluster) IsObjectNamespaced(obj runtime.Object) (bool, error) {
	return apiutil.IsObjectNamespaced(obj, c.fleet.scheme, c.fleet.mapper)
}

type noSubResource struct{}

func (noSubResource) Get(context.Context, client.Object, client.Object, ...client.SubResourceGetOption) error {
	return unsupported("subresources")
}

func (noSubResource) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	return unsupported("subresources")
}

func (noSubResource) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	return unsupported("subresources")
}

func (noSubResource) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	return unsupported("subresources")
}

func (noSubResource) Apply(context.Context, runtime.ApplyConfiguration, ...client.SubResourceApplyOption) error {
	return unsupported("subresources")
}

func (c *Cluster) toUnstructured(obj client.Object) (*unstructured.Unstructured, error) {
	gvk, err := c.gvkOf(obj)
	if err != nil {
		return nil, err
	}
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetGroupVersionKind(gvk)
	return u, nil
}

// json is the whole object as the API server would answer it.
func (s *stored) json() ([]byte, error) {
	m, err := json.Marshal(&s.meta)
	if err != nil {
		return nil, err
	}
	out := make([]byte, 0, len(m)+len(s.body.raw)+16)
	out = append(out, `{"metadata":`...)
	out = append(out, m...)
	if rest := s.body.raw[1:]; len(rest) > 1 { // body is a JSON object: "{...}"
		out = append(out, ',')
		out = append(out, rest...)
	} else {
		out = append(out, '}')
	}
	return out, nil
}

// into fills obj (typed, unstructured or metadata-only) with the object.
func (s *stored) into(obj runtime.Object) error {
	if p, ok := obj.(*metav1.PartialObjectMetadata); ok {
		p.APIVersion, p.Kind = s.gvk.ToAPIVersionAndKind()
		p.ObjectMeta = *s.meta.DeepCopy()
		return nil
	}
	raw, err := s.json()
	if err != nil {
		return err
	}
	return decodeInto(raw, obj)
}

func decodeInto(raw []byte, obj runtime.Object) error {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		o.Object = nil
		return o.UnmarshalJSON(raw)
	case *unstructured.UnstructuredList:
		o.Object, o.Items = nil, nil
		return o.UnmarshalJSON(raw)
	}
	return json.Unmarshal(raw, obj)
}

func emptyNil(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
