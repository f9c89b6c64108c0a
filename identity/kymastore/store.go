// Package kymastore is the one Kyma index of this project: discovery of
// how Kyma CRs are served (KymaResource), the one trimming of a Kyma CR's
// metadata (Trim), a paginated, trimmed list and watch of the Kyma CRs of
// one namespace (ListWatch), and ext-authz's in-memory Store fed by it. The
// Store keeps of each Kyma CR only its name, runtime-id label,
// skr-domain annotation, retired-certificates annotation (parsed once,
// 24 bytes), whether its deletion was asked for and, when ClassLabel is
// set, the value of that label (the runtime's rate-limit class), indexed by
// name and by label; it is a
// pinning.RuntimeLookup through pinning.LookupInIndex, the same precedence
// code as identity.NewKymaLookup over a controller-runtime cache (label
// before name; several Kymas with one label are an error), answered from
// two map reads without allocating.
//
// It depends on client-go's metadata client and reflector only, not on
// controller-runtime or client-go's typed clients: with it and
// identity/pinning, ext-authz does not link or initialize them. List pages
// and watch events are trimmed before the reflector holds them, so the
// initial list of many thousands of Kyma CRs does not keep their full
// metadata in memory at once.
package kymastore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity/pinning"
)

// listPageSize is the page size of the reflector's initial list.
const listPageSize = 500

// ErrNotSynced is LookupRuntime's error before the initial list arrived.
var ErrNotSynced = errors.New("kymastore: Kyma CRs not listed yet")

// kyma is what pinning reads of one Kyma CR (its name is the map key).
type kyma struct {
	label    string // kyma-project.io/runtime-id; "" when missing or empty
	domain   string // skr-domain annotation, raw; "" when not set
	retired  pinning.Retirement
	deleting bool   // its deletion was asked for (finalizers may keep it)
	class    string // value of the Store's ClassLabel, interned; "" when none
}

// Store holds the Kyma CRs of one namespace. Run feeds it; LookupRuntime
// reads it. The zero value is not usable: use New.
type Store struct {
	// ClassLabel, when set before Run, is the label whose value is a
	// runtime's class (pinning.Runtime.Class): ext-authz's rate limits.
	ClassLabel string

	mu      sync.RWMutex
	byName  map[string]kyma
	byLabel map[string][]string // label value -> names of the Kymas carrying it

	synced     chan struct{}
	syncedOnce sync.Once

	// failingSince: Unix nanoseconds of the first failed list or watch
	// request since the last one that succeeded; 0 while they succeed.
	failingSince atomic.Int64
}

var _ pinning.RuntimeLookup = (*Store)(nil)

// New returns an empty, not yet synced Store.
func New() *Store {
	return &Store{byName: map[string]kyma{}, byLabel: map[string][]string{}, synced: make(chan struct{})}
}

// Synced is closed once the initial list has been stored.
func (s *Store) Synced() <-chan struct{} { return s.synced }

// FailingSince is when listing or watching the Kyma CRs began to fail: the
// first failed list or watch request after the last that succeeded (the
// reflector retries with backoff meanwhile, and the store keeps what it
// had). Zero while they succeed.
func (s *Store) FailingSince() time.Time {
	if ns := s.failingSince.Load(); ns != 0 {
		return time.Unix(0, ns)
	}
	return time.Time{}
}

// record notes the result of a list or watch request.
func (s *Store) record(err error) {
	if err == nil {
		s.failingSince.Store(0)
		return
	}
	s.failingSince.CompareAndSwap(0, time.Now().UnixNano())
}

// Len is the number of Kyma CRs stored.
func (s *Store) Len() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.byName)
}

// LookupRuntime finds the Kyma CR of a runtime ID with
// pinning.LookupInIndex (the one implementation of the precedence: the
// Kyma CR labelled with it, several an error, else the one named with it
// unless its label names another runtime, else none), from two map reads.
// Before the initial list it fails with ErrNotSynced (callers fail closed).
func (s *Store) LookupRuntime(ctx context.Context, runtimeID string) (pinning.Runtime, bool, error) {
	select {
	case <-s.synced:
	default:
		return pinning.Runtime{}, false, ErrNotSynced
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	return pinning.LookupInIndex(ctx, storeIndex{s}, runtimeID)
}

// storeIndex is the Store as a pinning.KymaIndex; s.mu is held for reading.
type storeIndex struct{ s *Store }

func (x storeIndex) KymasLabelled(_ context.Context, id string) (int, pinning.KymaRef, error) {
	names := x.s.byLabel[id]
	if len(names) == 0 {
		return 0, pinning.KymaRef{}, nil
	}
	k := x.s.byName[names[0]]
	return len(names), pinning.KymaRef{Name: names[0], Label: k.label, SKRDomain: k.domain, Retired: k.retired, Deleting: k.deleting, Class: k.class}, nil
}

func (x storeIndex) KymaNamed(_ context.Context, name string) (pinning.KymaRef, bool, error) {
	k, ok := x.s.byName[name]
	return pinning.KymaRef{Name: name, Label: k.label, SKRDomain: k.domain, Retired: k.retired, Deleting: k.deleting, Class: k.class}, ok, nil
}

// entryOf reads a stored object: a Kyma as metadata, or the last state of a
// deleted one.
func (s *Store) entryOf(obj any) (name string, k kyma, err error) {
	if d, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	m, ok := obj.(*metav1.PartialObjectMetadata)
	if !ok {
		return "", kyma{}, fmt.Errorf("kymastore: unexpected object %T", obj)
	}
	name = m.Name
	k = kyma{label: m.Labels[contract.LabelRuntimeID], domain: m.Annotations[contract.AnnotationSKRDomain],
		retired: pinning.RetirementOf(m.Annotations[contract.AnnotationRetiredCertificates]), deleting: m.DeletionTimestamp != nil}
	if k.label == name {
		k.label = name // one string for both (the common case)
	}
	if v := m.Labels[s.ClassLabel]; s.ClassLabel != "" && v != "" {
		k.class = unique.Make(v).Value() // a few classes over many Kymas
	}
	return name, k, nil
}

// put and remove keep byName and byLabel consistent; s.mu is held.
func (s *Store) put(name string, k kyma) {
	s.remove(name)
	s.byName[name] = k
	if k.label != "" {
		s.byLabel[k.label] = append(s.byLabel[k.label], name)
	}
}

func (s *Store) remove(name string) {
	old, ok := s.byName[name]
	if !ok {
		return
	}
	delete(s.byName, name)
	if old.label == "" {
		return
	}
	names := s.byLabel[old.label]
	for i, n := range names {
		if n == name {
			names = append(names[:i:i], names[i+1:]...)
			break
		}
	}
	if len(names) == 0 {
		delete(s.byLabel, old.label)
	} else {
		s.byLabel[old.label] = names
	}
}

// Add, Update, Delete, Replace and Resync make the Store a
// toolscache.ReflectorStore.

func (s *Store) Add(obj any) error { return s.Update(obj) }

func (s *Store) Update(obj any) error {
	name, k, err := s.entryOf(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.put(name, k)
	return nil
}

func (s *Store) Delete(obj any) error {
	name, _, err := s.entryOf(obj)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.remove(name)
	return nil
}

// Replace swaps in the Kyma CRs of a (re)list and marks the Store synced.
func (s *Store) Replace(list []any, _ string) error {
	fresh := &Store{byName: make(map[string]kyma, len(list)), byLabel: make(map[string][]string)}
	for _, obj := range list {
		name, k, err := s.entryOf(obj)
		if err != nil {
			return err
		}
		fresh.put(name, k)
	}
	s.mu.Lock()
	s.byName, s.byLabel = fresh.byName, fresh.byLabel
	s.mu.Unlock()
	s.syncedOnce.Do(func() { close(s.synced) })
	return nil
}

func (s *Store) Resync() error { return nil }

// Trim is the one trimming of a Kyma CR's metadata, for this Store's
// reflector and as the cache transform (a client-go TransformFunc) of the
// components that read Kyma CRs through a controller-runtime cache
// (module-sync). It keeps only what the lookup and an informer read: type,
// name, namespace, UID, resource version, deletion timestamp, the
// runtime-id label when it is not empty (an empty label is no label, as
// identity.RuntimeIDOf and pinning.LookupInIndex read it), the
// skr-domain annotation (also when empty: that is domain-not-set) and the
// retired-certificates annotation. With it
// a cache of many Kyma CRs holds no managedFields and no
// last-applied-configuration. Other objects pass unchanged.
func Trim(obj any) (any, error) {
	if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
		return trim(m), nil
	}
	return obj, nil
}

func trim(m *metav1.PartialObjectMetadata, keepLabels ...string) *metav1.PartialObjectMetadata {
	t := &metav1.PartialObjectMetadata{TypeMeta: m.TypeMeta}
	t.Name, t.Namespace, t.UID, t.ResourceVersion = m.Name, m.Namespace, m.UID, m.ResourceVersion
	t.DeletionTimestamp = m.DeletionTimestamp
	if v := m.Labels[contract.LabelRuntimeID]; v != "" {
		t.Labels = map[string]string{contract.LabelRuntimeID: v}
	}
	for _, l := range keepLabels {
		if v := m.Labels[l]; v != "" {
			if t.Labels == nil {
				t.Labels = map[string]string{}
			}
			t.Labels[l] = v
		}
	}
	for _, key := range []string{contract.AnnotationSKRDomain, contract.AnnotationRetiredCertificates} {
		if v, ok := m.Annotations[key]; ok {
			if t.Annotations == nil {
				t.Annotations = make(map[string]string, 2)
			}
			t.Annotations[key] = v
		}
	}
	return t
}

// ListWatch lists and watches the Kyma CRs (resource gvr) of namespace as
// metadata, trimmed by Trim (keeping also the labels keepLabels). Its initial list is paginated (a list at
// resourceVersion "0" would be served whole from the API server's watch
// cache; "" honours the page limit) and each page trimmed before the next
// one is read.
func ListWatch(cfg *rest.Config, gvr schema.GroupVersionResource, namespace string, keepLabels ...string) (*toolscache.ListWatch, error) {
	mc, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("metadata client: %w", err)
	}
	ri := mc.Resource(gvr).Namespace(namespace)
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			if opts.ResourceVersion == "0" && opts.Continue == "" {
				opts.ResourceVersion = ""
				if opts.Limit == 0 {
					opts.Limit = listPageSize
				}
			}
			list, err := ri.List(ctx, opts)
			if err != nil {
				return nil, err
			}
			for i := range list.Items {
				list.Items[i] = *trim(&list.Items[i], keepLabels...)
			}
			return list, nil
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := ri.Watch(ctx, opts)
			if err != nil {
				return nil, err
			}
			return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
				// Bookmarks pass whole: the reflector reads their annotation k8s.io/initial-events-end.
				switch e.Type {
				case watch.Added, watch.Modified, watch.Deleted:
					if m, ok := e.Object.(*metav1.PartialObjectMetadata); ok {
						e.Object = trim(m, keepLabels...)
					}
				}
				return e, true
			}), nil
		},
	}, nil
}

// Run lists and watches the Kyma CRs of namespace into s until ctx is done
// (the reflector retries failed lists and watches with backoff).
func (s *Store) Run(ctx context.Context, cfg *rest.Config, gvr schema.GroupVersionResource, namespace string) error {
	var keep []string
	if s.ClassLabel != "" {
		keep = []string{s.ClassLabel}
	}
	lw, err := ListWatch(cfg, gvr, namespace, keep...)
	if err != nil {
		return err
	}
	return s.run(ctx, lw, "kymastore "+namespace)
}

// run runs a reflector of lw into s, recording whether its requests fail
// (FailingSince).
func (s *Store) run(ctx context.Context, lw *toolscache.ListWatch, name string) error {
	list, watchFunc := lw.ListWithContextFunc, lw.WatchFuncWithContext
	recorded := &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
			o, err := list(ctx, opts)
			s.record(err)
			return o, err
		},
		WatchFuncWithContext: func(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			w, err := watchFunc(ctx, opts)
			s.record(err)
			return w, err
		},
	}
	r := toolscache.NewReflectorWithOptions(recorded, &metav1.PartialObjectMetadata{}, s,
		toolscache.ReflectorOptions{Name: name, TypeDescription: "Kyma (metadata)"})
	r.RunWithContext(ctx)
	return ctx.Err()
}
