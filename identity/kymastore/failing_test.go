package kymastore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/seed-c8be168e/runtime-watcher/identity/kymastore"
)

// TestFailingSince: the store reports failing list and watch requests from
// the first failure until a request succeeds again, and keeps its content.
func TestFailingSince(t *testing.T) {
	var broken atomic.Bool
	watches := make(chan *watch.FakeWatcher, 16)
	lw := &toolscache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			if broken.Load() {
				return nil, errors.New("connection refused")
			}
			return &metav1.PartialObjectMetadataList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
				Items: []metav1.PartialObjectMetadata{*meta("kyma-1", "runtime-1", "skr1.example.com")}}, nil
		},
		WatchFuncWithContext: func(_ context.Context, opts metav1.ListOptions) (watch.Interface, error) {
			if broken.Load() {
				return nil, errors.New("connection refused")
			}
			w := watch.NewFake()
			watches <- w
			if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
				// A streaming list (client-go's reflector asks for one since
				// v0.35, and a KCP API server of 1.34 or newer answers it):
				// the items as ADDED, then the bookmark that ends them.
				go func() {
					w.Add(meta("kyma-1", "runtime-1", "skr1.example.com"))
					w.Action(watch.Bookmark, &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1",
						Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}})
				}()
			}
			return w, nil
		},
	}
	g := gomega.NewWithT(t)
	s := kymastore.New()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = s.RunListWatch(ctx, lw) }()
	g.Eventually(s.Synced()).WithTimeout(30 * time.Second).Should(gomega.BeClosed())
	if !s.FailingSince().IsZero() {
		t.Fatalf("failing since %v after a good list", s.FailingSince())
	}

	// The API server goes away: the watch ends with an error, every request
	// after it fails.
	before := time.Now()
	broken.Store(true)
	w := <-watches
	w.Error(&metav1.Status{Status: metav1.StatusFailure, Code: 500, Message: "gone"})
	g.Eventually(s.FailingSince).WithTimeout(30 * time.Second).ShouldNot(gomega.BeZero())
	first := s.FailingSince()
	if first.Before(before) {
		t.Errorf("failing since %v, before the failure at %v", first, before)
	}
	if _, found, _ := s.LookupRuntime(ctx, "runtime-1"); !found {
		t.Error("the store lost its content while the API server is away")
	}

	// Back: the next list succeeds and clears it.
	broken.Store(false)
	g.Eventually(s.FailingSince).WithTimeout(30 * time.Second).Should(gomega.BeZero())
}
