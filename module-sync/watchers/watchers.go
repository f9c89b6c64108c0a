// Package watchers keeps module-sync's Watchers: one per module resource,
// created and kept as configured by the leader, so that every runtime's
// webhook reports changes of Module CRs to module-sync's listener.
package watchers

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

// CheckInterval is how often the Watchers are checked against the
// configuration (a read from the cache; a write only when they differ).
const CheckInterval = time.Minute

// Config is what module-sync's Watchers are made of.
type Config struct {
	// KymaNamespace holds the Watchers.
	KymaNamespace string
	// Manager is the Watchers' spec.manager and managed-by label.
	Manager string
	// Service is the Watchers' serviceInfo: how the gateway reaches the
	// listener.
	Service v1beta2.Service
	// GatewaySelector selects the Istio Gateway of the Watchers.
	GatewaySelector map[string]string
	// ModuleResources are the SKR resources that are Module CRs.
	ModuleResources []mirror.ModuleResource
}

// Keeper creates and keeps module-sync's Watchers: one per module
// resource, labelled managed-by Manager; Watchers so labelled that the
// configuration no longer names are deleted. A manager.Runnable.
type Keeper struct {
	Client client.Client
	Config Config
}

// NeedLeaderElection: only the leader writes the Watchers.
func (w *Keeper) NeedLeaderElection() bool { return true }

// Start ensures the Watchers at once, then every CheckInterval.
func (w *Keeper) Start(ctx context.Context) error {
	log := ctrl.Log.WithName("watchers")
	t := time.NewTicker(CheckInterval)
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

// Name is the Watcher of a module resource: module-sync-<resource>-<hash of group/resource>.
func Name(r mirror.ModuleResource) string {
	sum := sha256.Sum256([]byte(r.Group + "/" + r.Resource))
	name := "module-sync-" + r.Resource
	if len(name) > 45 {
		name = name[:45]
	}
	return strings.TrimRight(name, "-") + "-" + hex.EncodeToString(sum[:])[:8]
}

// Desired are module-sync's Watchers for c.
func Desired(o Config) []*v1beta2.Watcher {
	out := make([]*v1beta2.Watcher, 0, len(o.ModuleResources))
	for _, r := range o.ModuleResources {
		out = append(out, &v1beta2.Watcher{
			ObjectMeta: metav1.ObjectMeta{
				Name: Name(r), Namespace: o.KymaNamespace,
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

func (w *Keeper) ensure(ctx context.Context) error {
	var errs []error
	want := map[string]bool{}
	for _, d := range Desired(w.Config) {
		want[d.Name] = true
		cur := &v1beta2.Watcher{}
		err := w.Client.Get(ctx, client.ObjectKeyFromObject(d), cur)
		switch {
		case apierrors.IsNotFound(err):
			if err := w.Client.Create(ctx, d); err != nil && !apierrors.IsAlreadyExists(err) {
				errs = append(errs, fmt.Errorf("create Watcher %s: %w", d.Name, err))
			}
		case err != nil:
			errs = append(errs, err)
		case !reflect.DeepEqual(cur.Spec, d.Spec) || cur.Labels[contract.LabelManagedBy] != w.Config.Manager:
			cur = cur.DeepCopy()
			cur.Spec = d.Spec
			if cur.Labels == nil {
				cur.Labels = map[string]string{}
			}
			cur.Labels[contract.LabelManagedBy] = w.Config.Manager
			if err := w.Client.Update(ctx, cur); err != nil {
				errs = append(errs, fmt.Errorf("update Watcher %s: %w", d.Name, err))
			}
		}
	}
	list := &v1beta2.WatcherList{}
	if err := w.Client.List(ctx, list, client.InNamespace(w.Config.KymaNamespace), client.MatchingLabels{contract.LabelManagedBy: w.Config.Manager}); err != nil {
		return errors.Join(append(errs, err)...)
	}
	for i := range list.Items {
		old := &list.Items[i]
		if want[old.Name] || !strings.HasPrefix(old.Name, "module-sync-") {
			continue
		}
		if err := w.Client.Delete(ctx, old); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete Watcher %s: %w", old.Name, err))
		}
	}
	return errors.Join(errs...)
}
