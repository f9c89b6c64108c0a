package identity

import (
	"context"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// listPageSize is the page size of the informer's initial list of Kyma CRs.
const listPageSize = 500

// NewKymaCache returns a controller-runtime cache for SAN pinning: Kyma CRs
// of one namespace as metav1.PartialObjectMetadata (a metadata-only
// informer), trimmed by TrimKyma, read without deep copies (never modify
// an object read from it), with the IndexRuntimeID index registered,
// and only Kyma CRs readable (any other type is an error, never a new
// informer). Its initial list is paginated and trimmed page by page, so
// memory at start-up stays close to the trimmed cache even with many
// thousands of Kyma CRs. Start it and wait for WaitForCacheSync before
// serving; read it with NewKymaLookup.
//
// It asks the API server once how Kyma CRs are served (an error when they
// are not: the Kyma CRD is missing) and maps only them afterwards, without
// a discovery client behind every read.
func NewKymaCache(ctx context.Context, cfg *rest.Config, namespace string) (cache.Cache, error) {
	mapper, err := kymaMapper(cfg)
	if err != nil {
		return nil, err
	}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	c, err := cache.New(cfg, cache.Options{
		Scheme:                      scheme,
		Mapper:                      mapper,
		DefaultNamespaces:           map[string]cache.Config{namespace: {}},
		DefaultTransform:            TrimKyma,
		ReaderFailOnMissingInformer: true,
		// Reads share the cached object instead of deep-copying it (on
		// every Check); readers must not modify what they get.
		DefaultUnsafeDisableDeepCopy: ptrTo(true),
		NewInformer: func(lw toolscache.ListerWatcher, obj runtime.Object, resync time.Duration, idx toolscache.Indexers) toolscache.SharedIndexInformer {
			return toolscache.NewSharedIndexInformer(pagedTrimmedListWatch{toolscache.ToListerWatcherWithContext(lw)}, obj, resync, idx)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("informer cache: %w", err)
	}
	if err := IndexRuntimeID(ctx, c); err != nil {
		return nil, fmt.Errorf("kyma informer: %w", err)
	}
	return c, nil
}

// kymaMapper discovers the resource of Kyma CRs and returns a RESTMapper
// that knows only it.
func kymaMapper(cfg *rest.Config) (meta.RESTMapper, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	gvk := v1beta2.KymaGroupVersionKind
	gv := gvk.GroupVersion()
	resources, err := dc.ServerResourcesForGroupVersion(gv.String())
	if err != nil {
		return nil, fmt.Errorf("the API server does not serve %s (is the Kyma CRD installed?): %w", gv, err)
	}
	for _, r := range resources.APIResources {
		if r.Kind != gvk.Kind || strings.Contains(r.Name, "/") {
			continue
		}
		if !r.Namespaced {
			return nil, fmt.Errorf("%s %s is cluster-scoped; SAN pinning reads namespaced Kyma CRs", gv, gvk.Kind)
		}
		// The namespaced cache maps list types too (KymaList).
		m := meta.NewDefaultRESTMapper([]schema.GroupVersion{gv})
		listGVK := gv.WithKind(gvk.Kind + "List")
		for _, k := range []schema.GroupVersionKind{gvk, listGVK} {
			m.AddSpecific(k, gv.WithResource(r.Name), gv.WithResource(r.SingularName), meta.RESTScopeNamespace)
		}
		fast := kymaRESTMapper{RESTMapper: m}
		for i, k := range []schema.GroupVersionKind{gvk, listGVK} {
			mapping, err := m.RESTMapping(k.GroupKind(), k.Version)
			if err != nil {
				return nil, err
			}
			fast.mappings[i] = *mapping
		}
		return fast, nil
	}
	return nil, fmt.Errorf("the API server serves no %s in %s (is the Kyma CRD installed?)", gvk.Kind, gv)
}

// kymaRESTMapper answers the mappings of Kyma and KymaList, asked on every
// cache read, without the lookups of meta.DefaultRESTMapper.
type kymaRESTMapper struct {
	meta.RESTMapper
	mappings [2]meta.RESTMapping
}

func (m kymaRESTMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	for _, mp := range m.mappings {
		gvk := mp.GroupVersionKind
		if gk == gvk.GroupKind() && (len(versions) == 0 || len(versions) == 1 && versions[0] == gvk.Version) {
			return &mp, nil
		}
	}
	return m.RESTMapper.RESTMapping(gk, versions...)
}

// pagedTrimmedListWatch makes the reflector's initial list paginated (a
// list at resourceVersion "0" is served whole from the API server's watch
// cache; "" — the most recent state — honours the page limit) and trims
// each page's objects before the pager collects them.
type pagedTrimmedListWatch struct {
	lw toolscache.ListerWatcherWithContext
}

func (p pagedTrimmedListWatch) ListWithContext(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if opts.ResourceVersion == "0" && opts.Continue == "" {
		opts.ResourceVersion = ""
		if opts.Limit == 0 {
			opts.Limit = listPageSize
		}
	}
	obj, err := p.lw.ListWithContext(ctx, opts)
	if list, ok := obj.(*metav1.PartialObjectMetadataList); ok && err == nil {
		for i := range list.Items {
			if t, err := TrimKyma(&list.Items[i]); err == nil {
				list.Items[i] = *t.(*metav1.PartialObjectMetadata)
			}
		}
	}
	return obj, err
}

func (p pagedTrimmedListWatch) WatchWithContext(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	return p.lw.WatchWithContext(ctx, opts)
}

func (p pagedTrimmedListWatch) List(opts metav1.ListOptions) (runtime.Object, error) {
	return p.ListWithContext(context.Background(), opts)
}

func (p pagedTrimmedListWatch) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	return p.WatchWithContext(context.Background(), opts)
}

func ptrTo[T any](v T) *T { return &v }
