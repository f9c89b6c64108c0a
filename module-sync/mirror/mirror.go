// Package mirror keeps the ModuleConfigs of one runtime equal to its Module
// CRs (docs/architecture.md §4.11): it lists the configured Module CR resources in
// the runtime (SKR) and creates, updates or deletes the ModuleConfigs of the
// runtime's Kyma in the KCP so that there is one per module, holding the
// Module CR trimmed to apiVersion, kind, metadata (name, namespace,
// generation, labels) and spec. It writes nothing when nothing changed, so a
// periodic pass over every runtime costs reads only.
//
// A ModuleConfig is named "<kyma>-<module>", lives in the Kyma's namespace,
// carries the labels LabelKymaName, LabelModuleName, contract.LabelRuntimeID
// and LabelManagedBy, and has the Kyma as owner. When a runtime has more
// than one Module CR of a kind, the oldest is mirrored and the ModuleConfig's
// state is Warning (Kyma's module operators likewise serve the oldest).
//
// The runtime is input, not authority (docs/security.md): the module's name
// comes from module-sync's configuration, never from the runtime; Module CRs
// are listed in pages of ListPage; a Module CR whose trimmed form is over
// MaxResourceBytes, or a resource with more than MaxModuleCRs Module CRs, is
// not mirrored (an existing ModuleConfig keeps its spec and gets state
// Error with condition reason TooLarge or TooMany).
package mirror

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
)

const (
	// LabelKymaName is the label with the Kyma's name on a ModuleConfig.
	LabelKymaName = "operator.kyma-project.io/kyma-name"
	// LabelModuleName is the label with the module's name on a ModuleConfig.
	LabelModuleName = "operator.kyma-project.io/module-name"
	// LabelManagedBy marks ModuleConfigs as written by module-sync.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy.
	ManagedBy = "module-sync"
	// ConditionMirrored is the condition type on a ModuleConfig.
	ConditionMirrored = "Mirrored"
)

// Bounds of what a runtime may hand to the KCP.
const (
	// MaxResourceBytes bounds a mirrored Module CR (trimmed, as JSON).
	MaxResourceBytes = 64 << 10
	// MaxModuleCRs bounds the Module CRs of one resource in one runtime.
	MaxModuleCRs = 100
	// ListPage is the page size of the lists of Module CRs.
	ListPage = 50
)

// ModuleResource is one kind of Module CR in the runtimes.
type ModuleResource struct {
	// Group, Version and Resource of the Module CRs; Version "" or "*"
	// takes the version the runtime prefers.
	schema.GroupVersionResource
	// Module is the module's name (required: it is never taken from the
	// runtime).
	Module string
}

// Kyma identifies the runtime's Kyma CR in the KCP.
type Kyma struct {
	Name      string
	Namespace string
	UID       types.UID
	RuntimeID string
}

// Mirror mirrors Module CRs into ModuleConfigs.
type Mirror struct {
	// KCP is a client for the KCP whose scheme knows api/v1alpha1.
	KCP client.Client
	// Resources are the Module CR resources to mirror.
	Resources []ModuleResource
	// Now is the clock for lastOperation; nil means metav1.Now.
	Now func() metav1.Time
}

// Result counts what a pass did.
type Result struct {
	Created, Updated, Deleted, Unchanged int
}

// Writes is the number of objects the pass wrote.
func (r Result) Writes() int { return r.Created + r.Updated + r.Deleted }

// Name is the name of the ModuleConfig of a module of a Kyma.
func Name(kyma, module string) string { return kyma + "-" + module }

// moduleCR is what a runtime holds for one module.
type moduleCR struct {
	module   string
	resource map[string]any // trimmed, JSON-normalised
	gen      int64
	chosen   string   // namespace/name of the mirrored CR
	ignored  []string // further CRs of the kind
	// refused, when set, is why the runtime's Module CRs are not mirrored
	// (reason TooLarge or TooMany) and message says more.
	refused, message string
}

// Sync makes the ModuleConfigs of kyma equal to the Module CRs in skr. A
// Module CR resource the runtime does not serve counts as no Module CRs; when
// a resource cannot be listed, its ModuleConfig is left as it is (every
// ModuleConfig of the Kyma, when the module name is neither configured nor
// known from the runtime) and Sync returns an error after doing the rest.
func (m *Mirror) Sync(ctx context.Context, skr client.Client, kyma Kyma) (Result, error) {
	var res Result
	existing := &v1alpha1.ModuleConfigList{}
	if err := m.KCP.List(ctx, existing, client.InNamespace(kyma.Namespace), client.MatchingLabels{LabelKymaName: kyma.Name}); err != nil {
		return res, fmt.Errorf("list ModuleConfigs: %w", err)
	}
	have := map[string]*v1alpha1.ModuleConfig{}
	for i := range existing.Items {
		mc := &existing.Items[i]
		have[mc.Labels[LabelModuleName]] = mc
	}

	var errs []error
	keep := map[string]bool{} // modules whose ModuleConfig must not be deleted
	for _, r := range m.Resources {
		if r.Module == "" {
			errs = append(errs, fmt.Errorf("%s: no module name configured", r.GroupVersionResource))
			keep["*"] = true // delete nothing
			continue
		}
		module := r.Module
		cr, err := readModule(ctx, skr, r)
		if err != nil {
			errs = append(errs, err)
			keep[module] = true
			continue
		}
		if cr == nil {
			continue
		}
		keep[module] = true
		if cr.refused != "" && have[module] == nil {
			res.Unchanged++ // nothing to mirror and nothing to report on
			continue
		}
		// A write that fails after creating or updating the object (its
		// status was refused) still counts as that write.
		changed, err := m.write(ctx, kyma, cr, have[module])
		if err != nil {
			errs = append(errs, err)
		}
		switch {
		case changed == created:
			res.Created++
		case changed == updated:
			res.Updated++
		case err == nil:
			res.Unchanged++
		}
	}

	if !keep["*"] {
		for module, mc := range have {
			if keep[module] {
				continue
			}
			if err := m.KCP.Delete(ctx, mc, client.Preconditions{UID: &mc.UID}); err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, fmt.Errorf("delete ModuleConfig %s: %w", mc.Name, err))
				continue
			}
			res.Deleted++
		}
	}
	return res, errors.Join(errs...)
}

// Remove deletes every ModuleConfig of kyma (the Kyma is going away; in a
// KCP with a garbage collector the owner reference does the same).
func (m *Mirror) Remove(ctx context.Context, kyma Kyma) (int, error) {
	list := &v1alpha1.ModuleConfigList{}
	if err := m.KCP.List(ctx, list, client.InNamespace(kyma.Namespace), client.MatchingLabels{LabelKymaName: kyma.Name}); err != nil {
		return 0, fmt.Errorf("list ModuleConfigs: %w", err)
	}
	var errs []error
	n := 0
	for i := range list.Items {
		if err := m.KCP.Delete(ctx, &list.Items[i]); err != nil && !apierrors.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("delete ModuleConfig %s: %w", list.Items[i].Name, err))
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// readModule lists one Module CR resource in the runtime, in pages, and
// returns the module's trimmed Module CR (nil when there is none).
func readModule(ctx context.Context, skr client.Client, r ModuleResource) (*moduleCR, error) {
	gvr := r.GroupVersionResource
	if gvr.Version == "*" {
		gvr.Version = ""
	}
	module := r.Module
	gvk, err := skr.RESTMapper().KindFor(gvr)
	if meta.IsNoMatchError(err) {
		// Not served by the runtime: no Module CRs of it, and its
		// ModuleConfig is to be deleted.
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("resolve %s: %w", gvr, err)
	}
	var items []unstructured.Unstructured
	for cont := ""; ; {
		list := &unstructured.UnstructuredList{}
		list.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
		if err := skr.List(ctx, list, client.Limit(ListPage), client.Continue(cont)); err != nil {
			if meta.IsNoMatchError(err) || apierrors.IsNotFound(err) {
				return nil, nil
			}
			return nil, fmt.Errorf("list %s: %w", gvr, err)
		}
		items = append(items, list.Items...)
		if len(items) > MaxModuleCRs {
			return &moduleCR{module: module, refused: "TooMany",
				message: fmt.Sprintf("the runtime has more than %d Module CRs of %s: none is mirrored", MaxModuleCRs, gvr.GroupResource())}, nil
		}
		if cont = list.GetContinue(); cont == "" {
			break
		}
	}
	if len(items) == 0 {
		return nil, nil
	}
	sort.Slice(items, func(i, j int) bool {
		ti, tj := items[i].GetCreationTimestamp(), items[j].GetCreationTimestamp()
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return key(&items[i]) < key(&items[j])
	})
	cr := &moduleCR{module: module, gen: items[0].GetGeneration(), chosen: key(&items[0])}
	for i := range items[1:] {
		cr.ignored = append(cr.ignored, key(&items[i+1]))
	}
	if cr.resource, err = trim(&items[0]); err != nil {
		return nil, err
	}
	if b, err := json.Marshal(cr.resource); err != nil || len(b) > MaxResourceBytes {
		return &moduleCR{module: module, refused: "TooLarge",
			message: fmt.Sprintf("the Module CR %s is over %d bytes: it is not mirrored", bounded(cr.chosen), MaxResourceBytes)}, nil
	}
	return cr, nil
}

// bounded cuts s, which the runtime chose.
func bounded(s string) string { return skrclient.Bounded(s) }

func key(u *unstructured.Unstructured) string {
	if u.GetNamespace() == "" {
		return u.GetName()
	}
	return u.GetNamespace() + "/" + u.GetName()
}

// trim keeps apiVersion, kind, metadata name/namespace/generation/labels and
// spec, normalised through JSON so that it compares with what the KCP stores.
func trim(u *unstructured.Unstructured) (map[string]any, error) {
	md := map[string]any{"name": u.GetName(), "generation": u.GetGeneration()}
	if ns := u.GetNamespace(); ns != "" {
		md["namespace"] = ns
	}
	if l := u.GetLabels(); len(l) > 0 {
		md["labels"] = l
	}
	out := map[string]any{"apiVersion": u.GetAPIVersion(), "kind": u.GetKind(), "metadata": md}
	if spec, ok := u.Object["spec"]; ok {
		out["spec"] = spec
	}
	return normalise(out)
}

func normalise(v any) (map[string]any, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	return out, json.Unmarshal(data, &out)
}

type change int

const (
	unchanged change = iota
	created
	updated
)

// write brings one ModuleConfig to the desired state, writing only what
// differs.
func (m *Mirror) write(ctx context.Context, kyma Kyma, cr *moduleCR, mc *v1alpha1.ModuleConfig) (change, error) {
	raw, err := json.Marshal(cr.resource)
	if err != nil {
		return unchanged, err
	}
	labels := map[string]string{LabelKymaName: kyma.Name, LabelModuleName: cr.module, LabelManagedBy: ManagedBy}
	if kyma.RuntimeID != "" {
		labels[contract.LabelRuntimeID] = kyma.RuntimeID
	}
	owner := metav1.OwnerReference{
		APIVersion: v1beta2.KymaGroupVersionKind.GroupVersion().String(), Kind: v1beta2.KymaGroupVersionKind.Kind,
		Name: kyma.Name, UID: kyma.UID,
	}
	op := unchanged
	switch {
	case cr.refused != "":
		// mc exists (Sync checked): its spec stays as it was.
	case mc == nil:
		mc = &v1alpha1.ModuleConfig{
			ObjectMeta: metav1.ObjectMeta{Name: Name(kyma.Name, cr.module), Namespace: kyma.Namespace, Labels: labels,
				OwnerReferences: []metav1.OwnerReference{owner}},
			Spec: v1alpha1.ModuleConfigSpec{Kyma: kyma.Name, Module: cr.module, Resource: k8sruntime.RawExtension{Raw: raw}},
		}
		if err := m.KCP.Create(ctx, mc); err != nil {
			return unchanged, fmt.Errorf("create ModuleConfig %s: %w", mc.Name, err)
		}
		op = created
	default:
		stored, _ := normalise(json.RawMessage(orNull(mc.Spec.Resource.Raw)))
		specSame := mc.Spec.Kyma == kyma.Name && mc.Spec.Module == cr.module && reflect.DeepEqual(stored, cr.resource)
		labelsSame := true
		for k, v := range labels {
			labelsSame = labelsSame && mc.Labels[k] == v
		}
		ownerSame := len(mc.OwnerReferences) == 1 && mc.OwnerReferences[0] == owner
		if !specSame || !labelsSame || !ownerSame {
			mc = mc.DeepCopy()
			if mc.Labels == nil {
				mc.Labels = map[string]string{}
			}
			for k, v := range labels {
				mc.Labels[k] = v
			}
			mc.OwnerReferences = []metav1.OwnerReference{owner}
			mc.Spec = v1alpha1.ModuleConfigSpec{Kyma: kyma.Name, Module: cr.module, Resource: k8sruntime.RawExtension{Raw: raw}}
			if err := m.KCP.Update(ctx, mc); err != nil {
				return unchanged, fmt.Errorf("update ModuleConfig %s: %w", mc.Name, err)
			}
			op = updated
		}
	}

	state, cond := v1alpha1.StateReady, metav1.Condition{Type: ConditionMirrored, Status: metav1.ConditionTrue,
		Reason: "Mirrored", Message: "mirrors " + bounded(cr.chosen)}
	switch {
	case cr.refused != "":
		state, cond.Status, cond.Reason, cond.Message = v1alpha1.StateError, metav1.ConditionFalse, cr.refused, cr.message
	case len(cr.ignored) > 0:
		state, cond.Reason = v1alpha1.StateWarning, "MultipleModuleCRs"
		cond.Message = bounded(fmt.Sprintf("mirrors the oldest Module CR %s; ignored: %s", cr.chosen, strings.Join(cr.ignored, ", ")))
	}
	cond.ObservedGeneration = mc.Generation
	old := meta.FindStatusCondition(mc.Status.Conditions, ConditionMirrored)
	if op == unchanged && mc.Status.State == state && mc.Status.ObservedGeneration == mc.Generation &&
		old != nil && old.Status == cond.Status && old.Reason == cond.Reason && old.Message == cond.Message && old.ObservedGeneration == cond.ObservedGeneration {
		return unchanged, nil
	}
	now := metav1.Now()
	if m.Now != nil {
		now = m.Now()
	}
	cond.LastTransitionTime = now
	mc = mc.DeepCopy()
	meta.SetStatusCondition(&mc.Status.Conditions, cond)
	mc.Status.State = state
	mc.Status.ObservedGeneration = mc.Generation
	mc.Status.LastOperation = &v1alpha1.LastOperation{
		Operation:      bounded(fmt.Sprintf("mirrored %s generation %d", cr.chosen, cr.gen)),
		LastUpdateTime: now,
	}
	if cr.refused != "" {
		mc.Status.LastOperation.Operation = cr.message
	}
	if err := m.KCP.Status().Update(ctx, mc); err != nil {
		return op, fmt.Errorf("update status of ModuleConfig %s: %w", mc.Name, err)
	}
	if op == unchanged {
		op = updated
	}
	return op, nil
}

func orNull(b []byte) []byte {
	if len(b) == 0 {
		return []byte("null")
	}
	return b
}
