package localenv

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The demo Module CR (a Sample in the SKR) and what the loop makes of it.
const (
	SampleName = "default"
	// SampleConfigMap is the CreateAndSync item the example module manager
	// derives from the Sample's spec.greeting.
	SampleConfigMap = SampleModule + "-config"
)

// SampleModuleConfig is the sample runtime's ModuleConfig of the demo module.
func SampleModuleConfig() client.ObjectKey {
	return client.ObjectKey{Namespace: KymaNamespace, Name: RuntimeID + "-" + SampleModule}
}

// NewSample is the demo Module CR with a greeting and a replica count.
func NewSample(greeting string, replicas int64) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	u.SetAPIVersion(SampleGVR.GroupVersion().String())
	u.SetKind("Sample")
	u.SetNamespace(SKRNamespace)
	u.SetName(SampleName)
	_ = unstructured.SetNestedField(u.Object, greeting, "spec", "greeting")
	_ = unstructured.SetNestedField(u.Object, replicas, "spec", "replicas")
	return u
}

// SetSampleGreeting creates the demo Module CR or sets its spec.greeting and
// spec.replicas; it returns when the write started.
func (s *System) SetSampleGreeting(ctx context.Context, greeting string, replicas int64) (time.Time, error) {
	if err := s.SKR.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: SKRNamespace}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return time.Time{}, err
	}
	// Patch first: a create attempt on an existing object also calls the
	// SKR's admission webhook, and that event would make the patch's wait
	// for the skr-webhook's per-object interval (1 s).
	at := time.Now()
	patch := fmt.Sprintf(`{"spec":{"greeting":%q,"replicas":%d}}`, greeting, replicas)
	err := s.SKR.Client.Patch(ctx, NewSample(greeting, replicas), client.RawPatch("application/merge-patch+json", []byte(patch)))
	if apierrors.IsNotFound(err) {
		at = time.Now()
		err = s.SKR.Client.Create(ctx, NewSample(greeting, replicas))
	}
	return at, err
}

// Observation is a change the module loop made visible: the greeting the
// KCP's ModuleConfig ("kcp") or the SKR's synced ConfigMap ("skr") holds,
// and when it was seen.
type Observation struct {
	Where    string // "kcp" or "skr"
	Greeting string
	Time     time.Time
}

// WatchModuleLoop watches the sample ModuleConfig in the KCP and the synced
// ConfigMap in the SKR and reports every greeting they take, until ctx ends.
func (s *System) WatchModuleLoop(ctx context.Context) (<-chan Observation, error) {
	out := make(chan Observation, 1024)
	kcp, err := client.NewWithWatch(s.KCP.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return nil, err
	}
	skr, err := client.NewWithWatch(s.SKR.Config, client.Options{Scheme: testenv.Scheme()})
	if err != nil {
		return nil, err
	}
	mc := SampleModuleConfig()
	go watchLoop(ctx, out, "kcp", func(c context.Context) (watch.Interface, error) {
		return kcp.Watch(c, &v1alpha1.ModuleConfigList{}, client.InNamespace(mc.Namespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", mc.Name)})
	}, func(o any) (string, bool) {
		m, ok := o.(*v1alpha1.ModuleConfig)
		if !ok {
			return "", false
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(m.Spec.Resource.Raw); err != nil {
			return "", false
		}
		g, _, _ := unstructured.NestedString(u.Object, "spec", "greeting")
		return g, true
	})
	go watchLoop(ctx, out, "skr", func(c context.Context) (watch.Interface, error) {
		return skr.Watch(c, &corev1.ConfigMapList{}, client.InNamespace(SKRNamespace),
			client.MatchingFieldsSelector{Selector: fields.OneTermEqualSelector("metadata.name", SampleConfigMap)})
	}, func(o any) (string, bool) {
		cm, ok := o.(*corev1.ConfigMap)
		if !ok {
			return "", false
		}
		return cm.Data["greeting"], true
	})
	return out, nil
}

// watchLoop reports each new value of one watched object, re-watching when
// the watch ends.
func watchLoop(ctx context.Context, out chan<- Observation, where string, start func(context.Context) (watch.Interface, error), value func(any) (string, bool)) {
	last := "\x00"
	for ctx.Err() == nil {
		w, err := start(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			g, ok := value(ev.Object)
			if !ok || g == last {
				continue
			}
			last = g
			select {
			case out <- Observation{Where: where, Greeting: g, Time: time.Now()}:
			default: // a reader that stopped must not block the watch
			}
		}
		w.Stop()
	}
}
