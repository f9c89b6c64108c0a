package controllers

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
)

// WatcherCheckInterval is how often the Watchers are checked against the
// configuration (a read from the cache; a write only when they differ).
const WatcherCheckInterval = time.Minute

// watchers creates and keeps module-sync's Watchers: one per module
// resource, labelled managed-by module-sync; Watchers so labelled that the
// configuration no longer names are deleted.
type watchers struct {
	client client.Client
	o      Options
}

// NeedLeaderElection: only the leader writes the Watchers.
func (w *watchers) NeedLeaderElection() bool { return true }

// Start ensures the Watchers at once, then every WatcherCheckInterval.
func (w *watchers) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("watchers")
	t := time.NewTicker(WatcherCheckInterval)
	defer t.Stop()
	for {
		if err := w.ensure(ctx); err != nil && ctx.Err() == nil {
			log.Error(err, "keeping module-sync's Watchers")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// WatcherName is the Watcher of a module resource: module-sync-<resource>-<hash of group/resource>.
func WatcherName(r mirror.ModuleResource) string {
	sum := sha256.Sum256([]byte(r.Group + "/" + r.Resource))
	name := "module-sync-" + r.Resource
	if len(name) > 45 {
		name = name[:45]
	}
	return strings.TrimRight(name, "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// DesiredWatchers are module-sync's Watchers for the options.
func DesiredWatchers(o Options) []*v1beta2.Watcher {
	o.defaults()
	out := make([]*v1beta2.Watcher, 0, len(o.ModuleResources))
	for _, r := range o.ModuleResources {
		out = append(out, &v1beta2.Watcher{
			ObjectMeta: metav1.ObjectMeta{
				Name: WatcherName(r), Namespace: o.KymaNamespace,
				Labels: map[string]string{contract.LabelManagedBy: o.Manager},
			},
			Spec: v1beta2.WatcherSpec{
				ServiceInfo:     o.Service,
				Manager:         o.Manager,
				ResourceToWatch: v1beta2.WatchableGVR{Group: r.Group, Version: r.Version, Resource: r.Resource},
				Field:           v1beta2.SpecField,
				Gateway:         v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{MatchLabels: o.GatewaySelector}},
			},
		})
	}
	return out
}

func (w *watchers) ensure(ctx context.Context) error {
	var errs []error
	want := map[string]bool{}
	for _, d := range DesiredWatchers(w.o) {
		want[d.Name] = true
		cur := &v1beta2.Watcher{}
		err := w.client.Get(ctx, client.ObjectKeyFromObject(d), cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := w.client.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("create Watcher %s: %w", d.Name, err))
			}
		case err != nil:
			errs = append(errs, err)
		case !reflect.DeepEqual(cur.Spec, d.Spec) || cur.Labels[contract.LabelManagedBy] != w.o.Manager:
			cur = cur.DeepCopy()
			cur.Spec = d.Spec
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[contract.LabelManagedBy] = w.o.Manager
			if err := w.client.Update(ctx, cur); err != nil {
				errs = append(errs, fmt.Errorf("update Watcher %s: %w", d.Name, err))
			}
		}
	}
	list := &v1beta2.WatcherList{}
	if err := w.client.List(ctx, list, client.InNamespace(w.o.KymaNamespace), client.MatchingLabels{contract.LabelManagedBy: w.o.Manager}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range list.Items {
		old := &list.Items[i]
		if want[old.Name] || !strings.HasPrefix(old.Name, "module-sync-") {
			continue
		}
		if err := w.client.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Watcher %s: %w", old.Name, err))
		}
	}
	return errors.Join(errs...)
}
