package runtimes

import (
	"context"
	"fmt"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
)

// finalize removes the SKR bundle (when the kubeconfig Secret still exists;
// without it the cluster is considered gone), the Certificate and its
// Secret, then the finalizer.
func (r *Reconciler) finalize(ctx context.Context, kyma *metav1.PartialObjectMetadata) error {
	if !controllerutil.ContainsFinalizer(kyma, Finalizer) {
		return nil
	}
	id := RuntimeID(kyma)
	key := client.ObjectKeyFromObject(kyma).String()
	kubeconfig, err := r.kubeconfig(ctx, key, id)
	if err != nil {
		return err
	}
	var skr client.Client
	if kubeconfig == nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonBundleLeft,
			fmt.Sprintf("kubeconfig Secret %s/%s is gone: the SKR bundle cannot be removed from the runtime", r.KymaNamespace, skrclient.SecretName(id)))
	} else if skr, err = r.Clients.For(ctx, key, kubeconfig); err != nil {
		r.event(kyma, corev1.EventTypeWarning, ReasonBundleLeft,
			fmt.Sprintf("kubeconfig Secret %s/%s is unusable (%v): the SKR bundle cannot be removed from the runtime", r.KymaNamespace, skrclient.SecretName(id), err))
	} else {
		if err := skrclient.BoundedError(r.removeBundle(ctx, skr)); err != nil {
			r.event(kyma, corev1.EventTypeWarning, ReasonCleanupFailed, err.Error())
			return err
		}
		r.event(kyma, corev1.EventTypeNormal, ReasonBundleRemoved, "removed the SKR bundle from the runtime")
	}
	for _, obj := range []client.Object{
		&certmanagerv1.Certificate{ObjectMeta: metav1.ObjectMeta{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}},
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: kyma.GetNamespace(), Name: certificates.Name(id)}},
	} {
		if err := r.Client.Delete(ctx, obj); client.IgnoreNotFound(err) != nil {
			r.event(kyma, corev1.EventTypeWarning, ReasonCleanupFailed, err.Error())
			return err
		} else if err == nil {
			recordWrite("cleanup-delete")
		}
	}
	orig := kyma.DeepCopy()
	controllerutil.RemoveFinalizer(kyma, Finalizer)
	if err := r.Client.Patch(ctx, kyma, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{})); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	recordWrite("kyma-finalizer")
	r.forget(key)
	recordOutcome("removed")
	return nil
}

// removeBundle deletes, in the runtime, the bundle objects vs-controller
// applied (those carrying its hash annotation), in bundle.Removal's order.
func (r *Reconciler) removeBundle(ctx context.Context, skr client.Client) error {
	for _, t := range append(bundle.Removal(r.Bundle), bundle.TakeoverRemoval(r.Bundle)...) {
		obj := &metav1.PartialObjectMetadata{}
		obj.SetGroupVersionKind(t.GVK)
		if err := skr.Get(ctx, t.Key, obj); err != nil {
			if apierrors.IsNotFound(err) {
				continue
			}
			return fmt.Errorf("read %s %s in the runtime: %w", t.GVK.Kind, t.Key, err)
		}
		if _, ours := obj.GetAnnotations()[diffapply.HashAnnotation]; !ours {
			continue
		}
		uid := obj.GetUID()
		if err := skr.Delete(ctx, obj, client.Preconditions{UID: &uid}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("delete %s %s in the runtime: %w", t.GVK.Kind, t.Key, err)
		}
		recordWrite("skr-delete")
	}
	return nil
}

// forget drops what is cached of a runtime: its client and what it is
// known to hold.
func (r *Reconciler) forget(runtimeKey string) {
	r.Clients.Forget(runtimeKey)
	r.memo.ForgetPrefix(runtimeKey + "|")
	if r.Trust != nil {
		r.Trust.Forget(runtimeKey)
	}
	if r.TakeOver != nil {
		r.TakeOver.Forget(runtimeKey)
	}
	r.unlabelled.Delete(runtimeKey)
	r.bundled.Delete(runtimeKey)
}
