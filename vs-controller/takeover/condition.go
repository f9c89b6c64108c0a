package takeover

// The take-over condition on the Kyma (docs/migrating-from-lifecycle-manager.md,
// "Watching progress"): only the Kymas of runtimes Lifecycle Manager set
// up get it, and it is written only when it changes.

import (
	"context"
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/diffapply"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmetrics"
)

const (
	// ConditionTakeOver is the type of the condition vs-controller sets in
	// status.conditions of the Kyma of a runtime Lifecycle Manager set up.
	// False while the runtime's webhook still posts with LM's certificate,
	// True once admission is switched to runtime-watcher's webhook.
	ConditionTakeOver = "RuntimeWatcherTakeOver"

	// Reasons of ConditionTakeOver, in the order a take-over goes through
	// them.
	//
	// CondReasonWaitingForLM: LM's objects are in the runtime and LM is not
	// stopped for it (no skip-reconciliation label); nothing is touched.
	CondReasonWaitingForLM = "WaitingForLifecycleManager"
	// CondReasonAdopting: LM is stopped; our webhook is brought up beside
	// LM's and admission switches when it is ready. The runtime is still
	// on LM's certificate.
	CondReasonAdopting = "Adopting"
	// CondReasonTakenOver: admission is switched to runtime-watcher's
	// webhook and LM's objects are removed (status True).
	CondReasonTakenOver = "TakenOver"
)

// takeOverCondition is the condition of one take-over step.
func takeOverCondition(status metav1.ConditionStatus, reason, msg string) metav1.Condition {
	return metav1.Condition{Type: ConditionTakeOver, Status: status, Reason: reason, Message: skrclient.Bounded(msg)}
}

// setTakeOverCondition makes the Kyma's ConditionTakeOver c. It remembers
// per runtime what it last found or wrote, so a pass that has nothing new
// to say costs nothing; otherwise it reads the Kyma in full (uncached) and
// writes its status only when the condition differs: a merge patch of
// status.conditions with an optimistic lock, keeping every other condition
// (Lifecycle Manager's) as it is, retried on a conflict. lastTransitionTime
// changes only with the status.
func (r *TakeOver) setTakeOverCondition(ctx context.Context, kyma client.Object, runtimeKey string, c metav1.Condition) error {
	want := string(c.Status) + "|" + c.Reason + "|" + c.Message
	if v, ok := r.conditions.Load(runtimeKey); ok && v == want {
		return nil
	}
	reader := r.APIReader
	if reader == nil {
		reader = r.Client // unstructured reads are not cached
	}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		live := &unstructured.Unstructured{}
		live.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		if err := reader.Get(ctx, client.ObjectKeyFromObject(kyma), live); err != nil {
			return err
		}
		conds, _, err := unstructured.NestedSlice(live.Object, "status", "conditions")
		if err != nil {
			return fmt.Errorf("status.conditions: %w", err)
		}
		// Our condition as a typed one, so that meta.SetStatusCondition
		// decides what changes (lastTransitionTime only with the status);
		// every other condition stays as the map it is.
		i := -1
		var ours []metav1.Condition
		for j, v := range conds {
			if m, ok := v.(map[string]any); ok && m["type"] == ConditionTakeOver {
				var cur metav1.Condition
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &cur); err != nil {
					return fmt.Errorf("status.conditions[%d]: %w", j, err)
				}
				i, ours = j, []metav1.Condition{cur}
				break
			}
		}
		if !meta.SetStatusCondition(&ours, c) {
			return nil // as it should be
		}
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&ours[0])
		if err != nil {
			return err
		}
		orig := live.DeepCopy()
		if i >= 0 {
			conds[i] = m
		} else {
			conds = append(conds, m)
		}
		if err := unstructured.SetNestedSlice(live.Object, conds, "status", "conditions"); err != nil {
			return err
		}
		if err := r.Client.Status().Patch(ctx, live, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}), client.FieldOwner(diffapply.FieldOwner)); err != nil {
			return err
		}
		vsmetrics.RuntimeWrites.WithLabelValues("kyma-status").Inc()
		return nil
	})
	if err != nil {
		return fmt.Errorf("set the Kyma's condition %s to %s: %w", ConditionTakeOver, c.Reason, err)
	}
	r.conditions.Store(runtimeKey, want)
	return nil
}
