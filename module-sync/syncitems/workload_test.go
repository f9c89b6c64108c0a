package syncitems_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	skrnames "github.com/seed-c8be168e/runtime-watcher/manifests/skr"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/grants"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncitems"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// podKinds are the kinds whose objects make Pods, with where their pod
// spec sits.
var podKinds = []struct {
	apiVersion, kind string
	wrap             func(name string, spec map[string]any) map[string]any
}{
	{"v1", "Pod", func(_ string, spec map[string]any) map[string]any { return map[string]any{"spec": spec} }},
	{"v1", "ReplicationController", func(name string, spec map[string]any) map[string]any {
		return map[string]any{"spec": map[string]any{"selector": map[string]any{"app": name}, "template": template(name, spec)}}
	}},
	{"apps/v1", "Deployment", workloadSpec},
	{"apps/v1", "ReplicaSet", workloadSpec},
	{"apps/v1", "StatefulSet", workloadSpec},
	{"apps/v1", "DaemonSet", workloadSpec},
	{"batch/v1", "Job", func(name string, spec map[string]any) map[string]any {
		spec["restartPolicy"] = "Never"
		return map[string]any{"spec": map[string]any{"template": template(name, spec)}}
	}},
	{"batch/v1", "CronJob", func(name string, spec map[string]any) map[string]any {
		spec["restartPolicy"] = "Never"
		return map[string]any{"spec": map[string]any{"schedule": "@daily",
			"jobTemplate": map[string]any{"spec": map[string]any{"template": template(name, spec)}}}}
	}},
}

func template(name string, spec map[string]any) map[string]any {
	return map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": name}}, "spec": spec}
}

func workloadSpec(name string, spec map[string]any) map[string]any {
	return map[string]any{"spec": map[string]any{"selector": map[string]any{"matchLabels": map[string]any{"app": name}}, "template": template(name, spec)}}
}

// workload is an object of kind k named name in ns whose pod spec is the
// JSON podSpec with one container added.
func workload(t *testing.T, k int, ns, name, podSpec string) *unstructured.Unstructured {
	t.Helper()
	spec := map[string]any{}
	if err := json.Unmarshal([]byte(podSpec), &spec); err != nil {
		t.Fatal(err)
	}
	c := map[string]any{"name": "main", "image": "registry.k8s.io/pause:3.10"}
	if extra, ok := spec["container"].(map[string]any); ok {
		for key, v := range extra {
			c[key] = v
		}
		delete(spec, "container")
	}
	spec["containers"] = []any{c}
	o := &unstructured.Unstructured{Object: podKinds[k].wrap(name, spec)}
	o.SetAPIVersion(podKinds[k].apiVersion)
	o.SetKind(podKinds[k].kind)
	o.SetNamespace(ns)
	o.SetName(name)
	return o
}

// TestWorkloadsStayInsideTheirGrant: with a grant of every pod-making kind
// in a namespace, the module's user can make workloads there that use only
// what its grant names or it created (issue 33's attack: a Pod mounting
// the bundle's skr-webhook-tls, or running as another ServiceAccount of
// the namespace, was accepted). The SKR API server refuses the rest itself
// (the policy module-sync keeps there), for every kind that makes Pods.
func TestWorkloadsStayInsideTheirGrant(t *testing.T) {
	testenv.SkipIfShort(t)
	ns := namespace(t)
	for _, name := range []string{skrnames.SecretName, "granted-secret", "other-secret"} {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, StringData: map[string]string{"k": "v"}}
		if err := skr.Create(bgCtx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"default", "granted-sa", "other-sa"} {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
		if err := skr.Create(bgCtx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	kinds := []v1alpha1.GrantedKind{{Kind: "ServiceAccount"}, {Kind: "ConfigMap"}}
	for _, k := range podKinds {
		group := ""
		if i := strings.Index(k.apiVersion, "/"); i > 0 {
			group = k.apiVersion[:i]
		}
		kinds = append(kinds, v1alpha1.GrantedKind{Group: group, Kind: k.kind})
	}
	spec := v1alpha1.ModuleGrantSpec{Kinds: kinds, Namespaces: []string{ns}, Workloads: &v1alpha1.WorkloadGrant{
		// The bundle's Secret is left out whatever the grant says.
		Secrets:         []string{"granted-secret", skrnames.SecretName},
		ServiceAccounts: []string{"granted-sa"},
	}}
	g := grants.From("kcp-system", "wl", &v1alpha1.ModuleGrant{Spec: spec})
	var r grants.Renderer
	if err := r.Ensure(bgCtx, skr, "skr", g); err != nil {
		t.Fatal(err)
	}
	// Another module with the same kinds but no workload grant.
	other := grants.From("kcp-system", "wl-other", &v1alpha1.ModuleGrant{Spec: v1alpha1.ModuleGrantSpec{Kinds: kinds, Namespaces: []string{ns}}})
	if err := r.Ensure(bgCtx, skr, "skr", other); err != nil {
		t.Fatal(err)
	}
	mod, otherMod := asModule(t, "wl"), asModule(t, "wl-other")

	// The module creates a ServiceAccount through module-sync: its
	// workloads may run as it once the inventory names it.
	sr := syncResource("wl-sa", item("sa", v1alpha1.CreateAndSync,
		raw(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"module-sa","namespace":%q}}`, ns)))
	res := syncitems.Apply(bgCtx, mod, g, sr)
	if st := itemStatus(t, res, "sa"); st.State != v1alpha1.ItemReady {
		t.Fatalf("the module's ServiceAccount: %+v", st)
	}
	sr.Status.Items = res.Items
	g.ServiceAccounts = syncitems.ServiceAccounts([]v1alpha1.SyncResource{*sr})
	if err := r.Ensure(bgCtx, skr, "skr", g); err != nil {
		t.Fatal(err)
	}
	// Adopting a ServiceAccount of the runtime is refused.
	adopt := item("adopt-sa", v1alpha1.CreateAndSync, raw(`{"apiVersion":"v1","kind":"ServiceAccount","metadata":{"name":"other-sa","namespace":%q}}`, ns))
	adopt.Adopt = true
	if st := itemStatus(t, syncitems.Apply(bgCtx, mod, g, syncResource("wl-adopt", adopt)), "adopt-sa"); st.State != v1alpha1.ItemRefused ||
		!strings.Contains(st.Message, "never adopted") {
		t.Errorf("adopting another ServiceAccount: %+v", st)
	}

	const bundleMount = `{"volumes":[{"name":"v","secret":{"secretName":"skr-webhook-tls"}}],"automountServiceAccountToken":false}`
	seq := 0
	create := func(c client.Client, k int, podSpec string) error {
		seq++
		return c.Create(bgCtx, workload(t, k, ns, fmt.Sprintf("wl-%d", seq), podSpec))
	}
	// The API server takes up a new policy asynchronously: module-sync
	// writes nothing as a module's user until its probe shows the policy
	// in effect (PolicyActive); every answer after must hold.
	probe := asModule(t, "probe.")
	if err := wait.PollUntilContextTimeout(bgCtx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		err := r.PolicyActive(ctx, probe, "skr")
		if err != nil && !errors.Is(err, grants.ErrWorkloadPolicyInactive) {
			return false, err
		}
		return err == nil, nil
	}); err != nil {
		t.Fatalf("the workload policy never came into effect: %v", err)
	}

	refused := []struct{ name, spec, want string }{
		{"mounts the bundle's Secret", bundleMount, "may not use the Secrets skr-webhook-tls"},
		{"mounts another Secret", `{"volumes":[{"name":"v","secret":{"secretName":"other-secret"}}],"automountServiceAccountToken":false}`, "other-secret"},
		{"projects another Secret", `{"volumes":[{"name":"v","projected":{"sources":[{"secret":{"name":"other-secret"}}]}}],"automountServiceAccountToken":false}`, "other-secret"},
		{"reads a Secret into its environment", `{"automountServiceAccountToken":false,"container":{"env":[{"name":"K","valueFrom":{"secretKeyRef":{"name":"skr-webhook-tls","key":"tls.key"}}}]}}`, "skr-webhook-tls"},
		{"reads a whole Secret into its environment", `{"automountServiceAccountToken":false,"container":{"envFrom":[{"secretRef":{"name":"other-secret"}}]}}`, "other-secret"},
		{"pulls with another Secret", `{"automountServiceAccountToken":false,"imagePullSecrets":[{"name":"other-secret"}]}`, "other-secret"},
		{"runs as another ServiceAccount", `{"serviceAccountName":"other-sa"}`, "ServiceAccount other-sa"},
		{"runs as another ServiceAccount without a mounted token", `{"serviceAccountName":"other-sa","automountServiceAccountToken":false}`, "ServiceAccount other-sa"},
		{"runs as the namespace's default with a token", `{}`, "ServiceAccount default"},
		{"projects a token of the default ServiceAccount", `{"serviceAccountName":"default","automountServiceAccountToken":false,"volumes":[{"name":"t","projected":{"sources":[{"serviceAccountToken":{"path":"t"}}]}}]}`, "ServiceAccount default"},
		{"uses the host network", `{"automountServiceAccountToken":false,"hostNetwork":true}`, "host namespaces"},
		{"uses the host PID namespace", `{"automountServiceAccountToken":false,"hostPID":true}`, "host namespaces"},
		{"mounts a host path", `{"automountServiceAccountToken":false,"volumes":[{"name":"h","hostPath":{"path":"/"}}]}`, "hostPath"},
		{"binds a host port", `{"automountServiceAccountToken":false,"container":{"ports":[{"containerPort":80,"hostPort":80}]}}`, "host ports"},
		{"runs privileged", `{"automountServiceAccountToken":false,"container":{"securityContext":{"privileged":true}}}`, "privileged"},
		{"adds SYS_ADMIN", `{"automountServiceAccountToken":false,"container":{"securityContext":{"capabilities":{"add":["SYS_ADMIN"]}}}}`, "privileged"},
		{"mounts an NFS volume", `{"automountServiceAccountToken":false,"volumes":[{"name":"n","nfs":{"server":"10.0.0.1","path":"/"}}]}`, "other volume types"},
	}
	for _, c := range refused {
		t.Run("refused: a Pod that "+c.name, func(t *testing.T) {
			err := create(mod, 0, c.spec)
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("%v, want Forbidden saying %q", err, c.want)
			}
			if !grants.IsWorkloadRefusal(err) {
				t.Errorf("%v: not recognised as the workload policy's refusal", err)
			}
		})
	}
	// Applied through module-sync, such a workload is an item Refused (not
	// an Error retried): the runtime's own admission said no.
	t.Run("refused: an item whose Deployment mounts the bundle's Secret", func(t *testing.T) {
		it := item("steal", v1alpha1.CreateAndSync, raw(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":"wl-steal","namespace":%q},`+
			`"spec":{"selector":{"matchLabels":{"a":"b"}},"template":{"metadata":{"labels":{"a":"b"}},"spec":{"automountServiceAccountToken":false,`+
			`"containers":[{"name":"c","image":"x"}],"volumes":[{"name":"v","secret":{"secretName":%q}}]}}}}`, ns, skrnames.SecretName))
		res := syncitems.Apply(bgCtx, mod, g, syncResource("wl-steal", it))
		if st := itemStatus(t, res, "steal"); st.State != v1alpha1.ItemRefused || !strings.Contains(st.Message, "may not use the Secrets "+skrnames.SecretName) {
			t.Errorf("%+v, want Refused by the runtime's admission", st)
		}
		if !res.Retry {
			t.Error("a refused workload is not retried: a ServiceAccount created in the same pass would never let it through")
		}
	})
	t.Run("not a workload refusal: RBAC's", func(t *testing.T) {
		err := mod.Create(bgCtx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: ns}})
		if !apierrors.IsForbidden(err) || grants.IsWorkloadRefusal(err) {
			t.Errorf("%v, want Forbidden by RBAC, not by the workload policy", err)
		}
	})
	for k := 1; k < len(podKinds); k++ {
		t.Run("refused: a "+podKinds[k].kind+" whose pods mount the bundle's Secret", func(t *testing.T) {
			if err := create(mod, k, bundleMount); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "skr-webhook-tls") {
				t.Errorf("%v, want Forbidden", err)
			}
		})
		t.Run("refused: a "+podKinds[k].kind+" whose pods run as another ServiceAccount", func(t *testing.T) {
			if err := create(mod, k, `{"serviceAccountName":"other-sa"}`); !apierrors.IsForbidden(err) {
				t.Errorf("%v, want Forbidden", err)
			}
		})
	}
	t.Run("refused: another module using what this grant names", func(t *testing.T) {
		err := create(otherMod, 0, `{"serviceAccountName":"granted-sa","volumes":[{"name":"v","secret":{"secretName":"granted-secret"}}]}`)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "module wl-other") {
			t.Errorf("%v, want Forbidden for module wl-other", err)
		}
	})

	allowed := []struct{ name, spec string }{
		{"mounts and reads the granted Secret as the granted ServiceAccount",
			`{"serviceAccountName":"granted-sa","volumes":[{"name":"v","secret":{"secretName":"granted-secret"}}],"container":{"envFrom":[{"secretRef":{"name":"granted-secret"}}]}}`},
		{"runs as the ServiceAccount the module created", `{"serviceAccountName":"module-sa"}`},
		{"runs as the namespace's default without a token", `{"automountServiceAccountToken":false,"volumes":[{"name":"c","configMap":{"name":"x"}},{"name":"e","emptyDir":{}}]}`},
		{"binds NET_BIND_SERVICE", `{"automountServiceAccountToken":false,"container":{"securityContext":{"capabilities":{"add":["NET_BIND_SERVICE"]}}}}`},
	}
	for _, c := range allowed {
		for k := range podKinds {
			t.Run("allowed: a "+podKinds[k].kind+" that "+c.name, func(t *testing.T) {
				if err := create(mod, k, c.spec); err != nil {
					t.Error(err)
				}
			})
		}
	}

	t.Run("the module's user never gets exec, attach, ephemeral containers or tokens", func(t *testing.T) {
		for _, ra := range []authorizationv1.ResourceAttributes{
			{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "exec"},
			{Namespace: ns, Verb: "get", Resource: "pods", Subresource: "exec"},
			{Namespace: ns, Verb: "create", Resource: "pods", Subresource: "attach"},
			{Namespace: ns, Verb: "patch", Resource: "pods", Subresource: "ephemeralcontainers"},
			{Namespace: ns, Verb: "update", Resource: "pods", Subresource: "ephemeralcontainers"},
			{Namespace: ns, Verb: "create", Resource: "serviceaccounts", Subresource: "token"},
			{Namespace: ns, Verb: "get", Resource: "secrets"},
		} {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: grants.User("wl"), ResourceAttributes: &ra}}
			if err := skr.Create(bgCtx, sar); err != nil {
				t.Fatal(err)
			}
			if sar.Status.Allowed {
				t.Errorf("%s %s/%s: allowed", ra.Verb, ra.Resource, ra.Subresource)
			}
		}
		// …while the kinds themselves are granted.
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: grants.User("wl"),
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "create", Resource: "pods"}}}
		if err := skr.Create(bgCtx, sar); err != nil || !sar.Status.Allowed {
			t.Errorf("create pods: %v %+v", err, sar.Status)
		}
	})

	t.Run("a narrowed grant takes the Secret and the ServiceAccount away", func(t *testing.T) {
		narrowed := grants.From("kcp-system", "wl", &v1alpha1.ModuleGrant{Spec: v1alpha1.ModuleGrantSpec{Kinds: kinds, Namespaces: []string{ns}}})
		if err := r.Ensure(bgCtx, skr, "skr", narrowed); err != nil {
			t.Fatal(err)
		}
		// The parameter change reaches the policy within moments.
		if err := wait.PollUntilContextTimeout(bgCtx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
			return apierrors.IsForbidden(create(mod, 0, allowed[0].spec)), nil
		}); err != nil {
			t.Error("the granted Secret stayed usable after the grant was narrowed")
		}
		if err := create(otherMod, 0, `{"automountServiceAccountToken":false}`); err != nil {
			t.Errorf("another module's entry was touched: %v", err)
		}
	})
}
