package takeover

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
)

// kymaConditions reads the Kyma's status.conditions.
func kymaConditions(t *testing.T, c client.Client, key client.ObjectKey) []metav1.Condition {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	if err := c.Get(context.Background(), key, u); err != nil {
		t.Fatal(err)
	}
	raw, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	var out []metav1.Condition
	for _, v := range raw {
		var c metav1.Condition
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(v.(map[string]any), &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, c)
	}
	return out
}

// backdate sets the lastTransitionTime of the Kyma's take-over condition
// an hour back.
func backdate(t *testing.T, c client.Client, key client.ObjectKey) {
	t.Helper()
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	if err := c.Get(context.Background(), key, u); err != nil {
		t.Fatal(err)
	}
	conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
	for _, v := range conds {
		if m := v.(map[string]any); m["type"] == ConditionTakeOver {
			m["lastTransitionTime"] = time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
		}
	}
	if err := unstructured.SetNestedSlice(u.Object, conds, "status", "conditions"); err != nil {
		t.Fatal(err)
	}
	if err := c.Status().Update(context.Background(), u); err != nil {
		t.Fatal(err)
	}
}

func TestSetTakeOverCondition(t *testing.T) {
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace("kcp-system")
	kyma.SetName("kyma-a")
	lmCond := map[string]any{"type": "Ready", "status": "True", "reason": "Ready", "message": "LM's", "lastTransitionTime": "2026-01-02T03:04:05Z", "observedGeneration": int64(3)}
	if err := unstructured.SetNestedField(kyma.Object, map[string]any{"state": "Ready", "conditions": []any{lmCond}}, "status"); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	fakecluster.AddKyma(scheme)
	c := fakecluster.New(t, scheme, fakecluster.WithObjects(kyma))
	patches := func() int { return c.Count(fakecluster.StatusPatch, "Kyma") }
	key := client.ObjectKeyFromObject(kyma)
	ctx := context.Background()

	step := func(r *TakeOver, cond metav1.Condition, wantPatches int) metav1.Condition {
		t.Helper()
		if err := r.setTakeOverCondition(ctx, kyma, key.String(), cond); err != nil {
			t.Fatal(err)
		}
		if patches() != wantPatches {
			t.Errorf("%s: %d status patches, want %d", cond.Reason, patches(), wantPatches)
		}
		conds := kymaConditions(t, c, key)
		if lm := meta.FindStatusCondition(conds, "Ready"); lm == nil || lm.Message != "LM's" || lm.ObservedGeneration != 3 {
			t.Errorf("%s: LM's condition not kept: %+v", cond.Reason, conds)
		}
		got := meta.FindStatusCondition(conds, ConditionTakeOver)
		if got == nil || got.Status != cond.Status || got.Reason != cond.Reason || got.Message != cond.Message {
			t.Fatalf("%s: condition %+v", cond.Reason, got)
		}
		return *got
	}

	r := &TakeOver{Client: c}
	step(r, takeOverCondition(metav1.ConditionFalse, CondReasonWaitingForLM, "w"), 1)
	step(r, takeOverCondition(metav1.ConditionFalse, CondReasonWaitingForLM, "w"), 1) // remembered: no read, no write
	// The condition as an hour old (lastTransitionTime has seconds: a
	// change within the same second would look unchanged).
	backdate(t, c, key)
	waiting := *meta.FindStatusCondition(kymaConditions(t, c, key), ConditionTakeOver)
	adopting := step(r, takeOverCondition(metav1.ConditionFalse, CondReasonAdopting, "a"), 2)
	if !adopting.LastTransitionTime.Equal(&waiting.LastTransitionTime) {
		t.Errorf("same status False: lastTransitionTime changed from %v to %v", waiting.LastTransitionTime, adopting.LastTransitionTime)
	}
	taken := step(r, takenOver, 3)
	if taken.LastTransitionTime.Equal(&adopting.LastTransitionTime) {
		t.Error("False to True: lastTransitionTime not changed")
	}
	// A restarted controller (nothing remembered) reads and finds it set.
	step(&TakeOver{Client: c}, takenOver, 3)
	if n := len(kymaConditions(t, c, key)); n != 2 {
		t.Errorf("%d conditions, want LM's and ours", n)
	}
}
