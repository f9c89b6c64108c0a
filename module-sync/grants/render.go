package grants

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
)

// Labels of the RBAC objects Renderer writes in a runtime.
const (
	LabelManagedBy = "operator.kyma-project.io/managed-by"
	ManagedBy      = "module-sync"
	LabelModule    = "operator.kyma-project.io/module-name"
	fieldManager   = "module-sync"
)

// verbs a granted kind gets: what the apply engine does with it.
var verbs = []string{"get", "list", "watch", "create", "update", "patch", "delete"}

// Names of a module's RBAC objects in a runtime.
func namespacedRole(module string) string { return User(module) + ":namespaced" }
func clusterRole(module string) string    { return User(module) + ":cluster" }

// Renderer keeps a module's RBAC in each runtime as its grant says. It
// remembers per runtime and module the grant it last rendered completely,
// and with which client, so a pass whose grant and client did not change
// sends no request. A new client of the runtime (its kubeconfig changed,
// or the runtime came back to this replica, whose shard dropped its
// clients when another replica owned it) renders again: what the runtime
// holds may have changed meanwhile.
type Renderer struct {
	mu   sync.Mutex
	last map[string]rendered
	// active: runtime key -> the probe client with which its API server
	// was found enforcing the workload policy (PolicyActive).
	active map[string]client.Client
}

type rendered struct {
	sum   [sha256.Size]byte
	admin client.Client
}

// Ensure writes, with the runtime's own (admin) client, the workload
// policy (WorkloadPolicy) and the grant's entry in its parameters, and the
// RBAC of grant's module user: a ClusterRole with the granted namespaced kinds,
// bound by a RoleBinding in each granted namespace that exists; a
// ClusterRole with the granted cluster-scoped kinds and its
// ClusterRoleBinding; and it deletes the module's RoleBindings in
// namespaces no longer granted. A kind the runtime does not serve yet, or
// a namespace that does not exist yet, is left out and the next Ensure
// tries again.
func (r *Renderer) Ensure(ctx context.Context, admin client.Client, runtimeKey string, g Grant) error {
	sum := digest(g)
	key := runtimeKey + "\x00" + g.Module
	r.mu.Lock()
	same := r.last[key] == rendered{sum: sum, admin: admin}
	r.mu.Unlock()
	if same {
		return nil
	}
	if err := ensureWorkloads(ctx, admin, g); err != nil {
		return err
	}
	objs, complete, err := render(ctx, admin, g)
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, o := range objs {
		if err := apply(ctx, admin, o, fieldManager); err != nil {
			return fmt.Errorf("write %T %s of module %s: %w", o, o.GetName(), g.Module, err)
		}
		if rb, ok := o.(*rbacv1.RoleBinding); ok {
			keep[rb.Namespace] = true
		}
	}
	old := &rbacv1.RoleBindingList{}
	if err := admin.List(ctx, old, client.MatchingLabels{LabelManagedBy: ManagedBy, LabelModule: g.Module}); err != nil {
		return fmt.Errorf("list RoleBindings of module %s: %w", g.Module, err)
	}
	for i := range old.Items {
		if rb := &old.Items[i]; !keep[rb.Namespace] {
			if err := admin.Delete(ctx, rb); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("delete RoleBinding %s/%s of module %s: %w", rb.Namespace, rb.Name, g.Module, err)
			}
		}
	}
	if complete {
		r.mu.Lock()
		if r.last == nil {
			r.last = map[string]rendered{}
		}
		r.last[key] = rendered{sum: sum, admin: admin}
		r.mu.Unlock()
	}
	return nil
}

// render is the RBAC of the grant's module in the runtime; complete is
// false when a granted kind or namespace is not there yet.
func render(ctx context.Context, admin client.Client, g Grant) ([]client.Object, bool, error) {
	complete := true
	labels := map[string]string{LabelManagedBy: ManagedBy, LabelModule: g.Module}
	subject := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: User(g.Module)}}
	rules := func(kinds []v1alpha1.GrantedKind, clusterScoped bool) ([]rbacv1.PolicyRule, error) {
		out := []rbacv1.PolicyRule{}
		for _, k := range kinds {
			if (k.Group == "" && k.Kind == "Secret") || !g.Found {
				continue
			}
			m, err := admin.RESTMapper().RESTMapping(schema.GroupKind{Group: k.Group, Kind: k.Kind})
			if meta.IsNoMatchError(err) {
				complete = false
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("kind %s.%s: %w", k.Kind, k.Group, err)
			}
			// A kind granted in the wrong list gets no rule: a namespaced
			// kind in a ClusterRoleBinding would reach every namespace.
			if (m.Scope.Name() == meta.RESTScopeNameRoot) != clusterScoped {
				continue
			}
			out = append(out, rbacv1.PolicyRule{APIGroups: []string{k.Group},
				Resources: []string{m.Resource.Resource, m.Resource.Resource + "/status"}, Verbs: verbs})
		}
		return out, nil
	}
	nsRules, err := rules(g.Spec.Kinds, false)
	if err != nil {
		return nil, false, err
	}
	clRules, err := rules(g.Spec.ClusterScopedKinds, true)
	if err != nil {
		return nil, false, err
	}
	meta := func(name, namespace string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: labels}
	}
	tm := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	objs := []client.Object{
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: meta(namespacedRole(g.Module), ""), Rules: nsRules},
		&rbacv1.ClusterRole{TypeMeta: tm("ClusterRole"), ObjectMeta: meta(clusterRole(g.Module), ""), Rules: clRules},
		&rbacv1.ClusterRoleBinding{TypeMeta: tm("ClusterRoleBinding"), ObjectMeta: meta(clusterRole(g.Module), ""), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: clusterRole(g.Module)}},
	}
	namespaces := []string{}
	if g.Found {
		namespaces = append(namespaces, g.Spec.Namespaces...)
	}
	sort.Strings(namespaces)
	for _, ns := range namespaces {
		if isKubeNamespace(ns) {
			continue
		}
		err := admin.Get(ctx, client.ObjectKey{Name: ns}, &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"}})
		if apierrors.IsNotFound(err) {
			complete = false
			continue
		}
		if err != nil {
			return nil, false, fmt.Errorf("namespace %s: %w", ns, err)
		}
		objs = append(objs, &rbacv1.RoleBinding{TypeMeta: tm("RoleBinding"), ObjectMeta: meta(User(g.Module), ns), Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: namespacedRole(g.Module)}})
	}
	return objs, complete, nil
}

func digest(g Grant) [sha256.Size]byte {
	b, err := json.Marshal(g)
	if err != nil {
		panic(errors.Join(errors.New("grants: a grant does not marshal"), err))
	}
	return sha256.Sum256(b)
}
