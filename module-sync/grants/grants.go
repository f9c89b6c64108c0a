// Package grants is module-sync's enforcement of module grants
// (docs/security.md, ARCHITECTURE §3.12): what a module's SyncResources may
// write in a runtime is its ModuleGrant in the KCP, declared by whoever
// installs the module.
//
// Two layers enforce it. The runtime's own API server is the enforcement:
// module-sync writes a module's objects as the user User(module)
// (impersonation), and Renderer keeps that user's RBAC in every runtime as
// the grant says (a ClusterRole per scope, a RoleBinding in each granted
// namespace that exists, a ClusterRoleBinding for the cluster-scoped
// kinds), so the runtime refuses anything else. Grant.Check is the check
// before the call: it refuses an item outside the grant with a message
// naming the grant, and it refuses what no grant may give (kube-*
// namespaces, the watcher bundle's objects, Secrets).
package grants

import (
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
)

// UserPrefix starts the runtime user a module's objects are written as.
const UserPrefix = "kyma-project.io:module-sync:module:"

// User is the runtime user module-sync impersonates for module's objects.
func User(module string) string { return UserPrefix + module }

// Grant is a module's grant as module-sync enforces it.
type Grant struct {
	// Name names the grant in messages: "ModuleGrant <namespace>/<module>".
	Name   string
	Module string
	// Found is false when the module has no ModuleGrant (it may write
	// nothing).
	Found bool
	Spec  v1alpha1.ModuleGrantSpec
	// ServiceAccounts ("namespace/name") the module created through
	// module-sync in the runtime: its workloads may run as them
	// (WorkloadPolicy), besides those Spec.Workloads names.
	ServiceAccounts []string
}

// From is the grant of module in namespace; mg nil: the module has none.
func From(namespace, module string, mg *v1alpha1.ModuleGrant) Grant {
	g := Grant{Name: fmt.Sprintf("ModuleGrant %s/%s", namespace, module), Module: module}
	if mg != nil {
		g.Found, g.Spec = true, mg.Spec
	}
	return g
}

// IsBundleName says whether name is one of the watcher bundle's objects
// (manifests/skr's one list, which vs-controller names its objects from):
// no module may write them, or use them in its workloads, whatever its
// grant.
func IsBundleName(name string) bool { return skr.IsBundleName(name) }

// CheckKind refuses, before the runtime is asked anything, a kind the
// grant names in neither list (and Secrets).
func (g Grant) CheckKind(gk schema.GroupKind) error {
	switch {
	case gk.Group == "" && gk.Kind == "Secret":
		return errSecret
	case !g.Found:
		return g.notFound()
	case !hasKind(g.Spec.Kinds, gk) && !hasKind(g.Spec.ClusterScopedKinds, gk):
		return fmt.Errorf("%s does not grant the kind %s", g.Name, gk)
	}
	return nil
}

var errSecret = errors.New("secrets are not synced: a SyncResource must not carry sensitive data (it is stored in the KCP)")

// Writes says whether the grant lets writer's SyncResources be applied:
// writer is named in spec.managers. The error says why not.
func (g Grant) Writes(writer string) error {
	if !g.Found {
		return g.notFound()
	}
	for _, m := range g.Spec.Managers {
		if m == writer {
			return nil
		}
	}
	if writer == "" {
		writer = "nobody (no " + v1alpha1.AnnotationWrittenBy + " annotation)"
	} else {
		writer = fmt.Sprintf("%q", writer)
	}
	return fmt.Errorf("written by %s, whom %s does not name in spec.managers: nothing is applied until a grant names the writer", writer, g.Name)
}

func (g Grant) notFound() error {
	return fmt.Errorf("no %s: the module may write nothing in the runtimes until the platform grants it", g.Name)
}

// Check says whether the grant lets the module write (or delete) the
// object of kind gvk named namespace/name (namespace "" for a
// cluster-scoped object); the error names the grant.
func (g Grant) Check(gvk schema.GroupVersionKind, namespaced bool, namespace, name string) error {
	gk := gvk.GroupKind()
	switch {
	case gk.Group == "" && gk.Kind == "Secret":
		return errSecret
	case IsBundleName(name):
		return fmt.Errorf("%s %q belongs to the watcher's bundle, which no module may write", gk.Kind, name)
	case isKubeNamespace(namespace) || (gk.Group == "" && gk.Kind == "Namespace" && isKubeNamespace(name)):
		return fmt.Errorf("namespace %q is the cluster's own, which no module may write", firstNonEmpty(namespace, name))
	case !g.Found:
		return g.notFound()
	}
	if !namespaced {
		if !hasKind(g.Spec.ClusterScopedKinds, gk) {
			return fmt.Errorf("%s does not grant the cluster-scoped kind %s", g.Name, gk)
		}
		return nil
	}
	if !hasKind(g.Spec.Kinds, gk) {
		return fmt.Errorf("%s does not grant the kind %s", g.Name, gk)
	}
	for _, ns := range g.Spec.Namespaces {
		if ns == namespace {
			return nil
		}
	}
	return fmt.Errorf("%s does not grant the namespace %q", g.Name, namespace)
}

func isKubeNamespace(ns string) bool { return strings.HasPrefix(ns, "kube-") }

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func hasKind(kinds []v1alpha1.GrantedKind, gk schema.GroupKind) bool {
	for _, k := range kinds {
		if k.Group == gk.Group && k.Kind == gk.Kind {
			return true
		}
	}
	return false
}
