// Package fakeleases is a Lease client without an API server for the
// tests of shard members (client-go's fake clientset): writes are numbered
// with a resourceVersion as an API server does, and an update with a stale
// one is refused with a conflict, so that a member's optimistic writes
// behave as against the real thing.
package fakeleases

import (
	"strconv"
	"sync"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// New returns a clientset whose Leases carry resourceVersions.
func New() *fake.Clientset {
	cs := fake.NewClientset()
	var mu sync.Mutex
	rv := 0
	cs.PrependReactor("*", "leases", func(a clienttesting.Action) (bool, runtime.Object, error) {
		o, ok := a.(interface{ GetObject() runtime.Object })
		if !ok {
			return false, nil, nil
		}
		mu.Lock()
		defer mu.Unlock()
		obj := o.GetObject().(metav1.Object)
		if a.GetVerb() == "update" && obj.GetResourceVersion() != "" {
			cur, err := cs.Tracker().Get(coordinationv1.SchemeGroupVersion.WithResource("leases"), a.GetNamespace(), obj.GetName())
			if err == nil && cur.(metav1.Object).GetResourceVersion() != obj.GetResourceVersion() {
				return true, nil, apierrors.NewConflict(coordinationv1.Resource("leases"), obj.GetName(), nil)
			}
		}
		rv++
		obj.SetResourceVersion(strconv.Itoa(rv))
		return false, nil, nil
	})
	return cs
}
