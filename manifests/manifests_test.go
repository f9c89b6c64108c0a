package manifests

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func TestManifests(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "manifests")
}

// root is the repository root; all paths below are relative to it.
var root = testenv.RepoRoot()

func repoPath(p ...string) string { return filepath.Join(append([]string{root}, p...)...) }

// kustomizations lists every folder under manifests/ with a kustomization
// that can be built on its own (Components are built through the overlays
// that use them), relative to the repository root.
func kustomizations() []string {
	var dirs []string
	err := filepath.WalkDir(repoPath("manifests"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		var k struct {
			Kind string `json:"kind"`
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if err := sigsyaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if k.Kind != "Component" {
			rel, _ := filepath.Rel(root, filepath.Dir(path))
			dirs = append(dirs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		panic(err)
	}
	sort.Strings(dirs)
	return dirs
}

var (
	buildMu    sync.Mutex
	buildCache = map[string][]*unstructured.Unstructured{}
)

// build runs `kustomize build dir` in process; the objects it returns are
// copies the caller may change.
func build(dir string) ([]*unstructured.Unstructured, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	objs, ok := buildCache[dir]
	if !ok {
		k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
		m, err := k.Run(filesys.MakeFsOnDisk(), repoPath(dir))
		if err != nil {
			return nil, err
		}
		for _, r := range m.Resources() {
			b, err := r.MarshalJSON()
			if err != nil {
				return nil, err
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(b); err != nil {
				return nil, fmt.Errorf("%s: %w", dir, err)
			}
			objs = append(objs, u)
		}
		buildCache[dir] = objs
	}
	out := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		out[i] = o.DeepCopy()
	}
	return out, nil
}

// mustBuild is build for specs: it fails the spec on error.
func mustBuild(dir string) []*unstructured.Unstructured {
	GinkgoHelper()
	objs, err := build(dir)
	Expect(err).NotTo(HaveOccurred(), "kustomize build %s", dir)
	return objs
}

// find returns the objects of kind (and name, when not empty).
func find(objs []*unstructured.Unstructured, kind, name string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind && (name == "" || o.GetName() == name) {
			out = append(out, o)
		}
	}
	return out
}

// one returns the single object of kind and name, failing the spec if there
// is not exactly one, decoded into out (a typed object) when out is not nil.
func one(objs []*unstructured.Unstructured, kind, name string, out any) *unstructured.Unstructured {
	GinkgoHelper()
	found := find(objs, kind, name)
	Expect(found).To(HaveLen(1), "want exactly one %s %q", kind, name)
	if out != nil {
		decode(found[0], out)
	}
	return found[0]
}

// decode converts through JSON, so that types with their own JSON
// unmarshalling (Istio's protobuf specs) are decoded as the API server does.
func decode(u *unstructured.Unstructured, out any) {
	GinkgoHelper()
	b, err := json.Marshal(u.Object)
	Expect(err).NotTo(HaveOccurred())
	Expect(json.Unmarshal(b, out)).To(Succeed(), "decode %s %s", u.GetKind(), u.GetName())
}

// warnings collects the API server's warnings (Pod Security, unknown or
// duplicate fields, deprecations) for the requests of one client.
type warnings struct {
	mu   sync.Mutex
	list []string
}

func (w *warnings) HandleWarningHeader(_ int, _ string, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.list = append(w.list, text)
}

func (w *warnings) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := w.list
	w.list = nil
	return out
}

var (
	env *testenv.Env
	kcp *testenv.Cluster
	// strict is a client of the KCP API server whose warnings are recorded.
	strict client.Client
	warned = &warnings{}
)

var _ = BeforeSuite(func() {
	var err error
	env, err = testenv.Start("kcp")
	Expect(err).NotTo(HaveOccurred())
	kcp = env.Cluster("kcp")
	cfg := rest.CopyConfig(kcp.Config)
	cfg.WarningHandler = warned
	strict, err = client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// ensureNamespaces creates, for real, the Namespace objects of objs (as
// they are: a strict create) and a plain namespace for every other
// namespace an object of objs lives in, since a namespaced object can only
// be created in an existing namespace.
func ensureNamespaces(ctx context.Context, objs []*unstructured.Unstructured) {
	GinkgoHelper()
	for _, ns := range find(objs, "Namespace", "") {
		err := strict.Create(ctx, ns.DeepCopy(), client.FieldValidation(metav1.FieldValidationStrict))
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred(), "create Namespace %s", ns.GetName())
		}
	}
	for _, o := range objs {
		if n := o.GetNamespace(); n != "" {
			err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n}})
			if !apierrors.IsAlreadyExists(err) {
				Expect(err).NotTo(HaveOccurred(), "create namespace %s", n)
			}
		}
	}
	Expect(warned.take()).To(BeEmpty(), "warnings while creating namespaces")
}

// dryRunCreate has the API server validate obj as `kubectl create
// --dry-run=server --validate=strict` does, and returns its warnings.
func dryRunCreate(ctx context.Context, obj *unstructured.Unstructured) ([]string, error) {
	err := strict.Create(ctx, obj.DeepCopy(), client.DryRunAll, client.FieldValidation(metav1.FieldValidationStrict))
	return warned.take(), err
}

var _ = Describe("every kustomization under manifests/", func() {
	dirs := kustomizations()

	It("includes the KCP overlays, the samples and the SKR base", func() {
		Expect(dirs).To(ContainElements(
			"manifests/kcp/base", "manifests/kcp/overlays/production", "manifests/kcp/overlays/kind",
			"manifests/samples", "manifests/skr"))
	})

	for _, dir := range dirs {
		It("builds: "+dir, func() {
			objs, err := build(dir)
			Expect(err).NotTo(HaveOccurred())
			Expect(objs).NotTo(BeEmpty())
			for _, o := range objs {
				Expect(o.GetAnnotations()).NotTo(HaveKey("config.kubernetes.io/local-config"),
					"%s %s: kustomize must not emit local settings", o.GetKind(), o.GetName())
			}
		})
	}
})

var _ = Describe("the API server", Ordered, func() {
	ctx := context.Background()

	BeforeAll(func() {
		// kcp-system as the base declares it (Pod Security "restricted"
		// warnings), whichever kustomization is checked first.
		ensureNamespaces(ctx, mustBuild("manifests/kcp/base"))
	})

	for _, dir := range kustomizations() {
		It("accepts every object of "+dir+" (server-side dry-run, strict fields, no warnings)", func() {
			objs := mustBuild(dir)
			ensureNamespaces(ctx, objs)
			for _, o := range objs {
				if o.GetKind() == "Namespace" {
					continue // created for real by ensureNamespaces
				}
				w, err := dryRunCreate(ctx, o)
				Expect(err).NotTo(HaveOccurred(), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
				Expect(w).To(BeEmpty(), "%s %s/%s", o.GetKind(), o.GetNamespace(), o.GetName())
			}
		})
	}

	// The checks above have teeth: these objects are each a small mistake.
	Context("rejects or warns about a broken object (controls for the checks above)", func() {
		BeforeAll(func() {
			ensureNamespaces(ctx, mustBuild("manifests/kcp/overlays/kind"))
		})

		It("rejects a misspelled field of the Gateway", func() {
			gw := one(mustBuild("manifests/kcp/overlays/kind"), "Gateway", "kcp-gateway", nil)
			servers, _, _ := unstructured.NestedSlice(gw.Object, "spec", "servers")
			tls := servers[0].(map[string]any)["tls"].(map[string]any)
			tls["mod"] = tls["mode"]
			delete(tls, "mode")
			Expect(unstructured.SetNestedSlice(gw.Object, servers, "spec", "servers")).To(Succeed())
			_, err := dryRunCreate(ctx, gw)
			Expect(err).To(HaveOccurred())
			Expect(err.Error()).To(ContainSubstring("mod"))
		})

		It("rejects an AuthorizationPolicy action that does not exist", func() {
			ap := one(mustBuild("manifests/kcp/overlays/kind"), "AuthorizationPolicy", "runtime-watcher-ext-authz", nil)
			Expect(unstructured.SetNestedField(ap.Object, "EXTERNAL", "spec", "action")).To(Succeed())
			_, err := dryRunCreate(ctx, ap)
			Expect(err).To(HaveOccurred())
		})

		It("warns about a container that may run as root in kcp-system (Pod Security restricted)", func() {
			d := one(mustBuild("manifests/kcp/overlays/kind"), "Deployment", "ext-authz", nil)
			unstructured.RemoveNestedField(d.Object, "spec", "template", "spec", "securityContext", "runAsNonRoot")
			w, err := dryRunCreate(ctx, d)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.Join(w, "\n")).To(ContainSubstring("runAsNonRoot"))
		})
	})

	Context("RBAC, least privilege (SubjectAccessReviews against the real authorizer)", func() {
		BeforeAll(func() {
			// The roles and bindings of the kind overlay and the example
			// operator, created for real (after the dry-run specs above).
			var objs []*unstructured.Unstructured
			objs = append(objs, mustBuild("manifests/kcp/overlays/kind")...)
			objs = append(objs, mustBuild("manifests/samples/example-operator")...)
			ensureNamespaces(ctx, objs)
			for _, o := range objs {
				switch o.GetKind() {
				case "ServiceAccount", "Role", "ClusterRole", "RoleBinding", "ClusterRoleBinding":
					Expect(kcp.Client.Create(ctx, o.DeepCopy())).To(Succeed(), "%s %s", o.GetKind(), o.GetName())
				}
			}
		})

		type access struct {
			ns, verb, group, resource, subresource string
		}
		can := func(sa string, a access) bool {
			GinkgoHelper()
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:kcp-system:" + sa,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kcp-system", "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource, Subresource: a.subresource,
				},
			}}
			Expect(kcp.Client.Create(ctx, sar)).To(Succeed())
			return sar.Status.Allowed
		}
		const kyma, istio, watcherGroup = "operator.kyma-project.io", "networking.istio.io", "operator.kyma-project.io"

		DescribeTable("grants what each binary needs",
			func(sa string, a access) {
				Expect(can(sa, a)).To(BeTrue(), "%s should be allowed to %+v", sa, a)
			},
			Entry("ext-authz watches Kymas in kcp-system", "ext-authz", access{"kcp-system", "watch", kyma, "kymas", ""}),
			Entry("ext-authz lists Kymas in kcp-system", "ext-authz", access{"kcp-system", "list", kyma, "kymas", ""}),
			Entry("vs-controller lists Gateways in istio-system", "vs-controller", access{"istio-system", "list", istio, "gateways", ""}),
			Entry("vs-controller creates VirtualServices beside a Watcher", "vs-controller", access{"team-a", "create", istio, "virtualservices", ""}),
			Entry("vs-controller patches Watcher status", "vs-controller", access{"team-a", "patch", watcherGroup, "watchers", "status"}),
			Entry("vs-controller sets Watcher finalizers", "vs-controller", access{"team-a", "update", watcherGroup, "watchers", "finalizers"}),
			Entry("vs-controller patches Kymas (finalizer) in kcp-system", "vs-controller", access{"kcp-system", "patch", kyma, "kymas", ""}),
			Entry("vs-controller reads kubeconfig Secrets in kcp-system", "vs-controller", access{"kcp-system", "watch", "", "secrets", ""}),
			Entry("vs-controller creates Certificates in kcp-system", "vs-controller", access{"kcp-system", "create", "cert-manager.io", "certificates", ""}),
			Entry("vs-controller takes the leader Lease in kcp-system", "vs-controller", access{"kcp-system", "update", "coordination.k8s.io", "leases", ""}),
			Entry("vs-controller records events", "vs-controller", access{"kcp-system", "create", "", "events", ""}),
			Entry("the example operator watches Kymas in kcp-system", "example-operator", access{"kcp-system", "watch", kyma, "kymas", ""}),
		)

		DescribeTable("grants nothing more",
			func(sa string, a access) {
				Expect(can(sa, a)).To(BeFalse(), "%s should NOT be allowed to %+v", sa, a)
			},
			Entry("ext-authz: Kymas elsewhere", "ext-authz", access{"default", "list", kyma, "kymas", ""}),
			Entry("ext-authz: changing Kymas", "ext-authz", access{"kcp-system", "update", kyma, "kymas", ""}),
			Entry("ext-authz: Secrets", "ext-authz", access{"kcp-system", "get", "", "secrets", ""}),
			Entry("vs-controller: Secrets outside kcp-system", "vs-controller", access{"kube-system", "get", "", "secrets", ""}),
			Entry("vs-controller: Secrets cluster-wide", "vs-controller", access{"", "list", "", "secrets", ""}),
			Entry("vs-controller: creating Secrets in the KCP", "vs-controller", access{"kcp-system", "create", "", "secrets", ""}),
			Entry("vs-controller: Certificates outside kcp-system", "vs-controller", access{"istio-system", "create", "cert-manager.io", "certificates", ""}),
			Entry("vs-controller: changing Gateways", "vs-controller", access{"istio-system", "update", istio, "gateways", ""}),
			Entry("vs-controller: Kymas outside kcp-system", "vs-controller", access{"default", "list", kyma, "kymas", ""}),
			Entry("vs-controller: Leases outside kcp-system", "vs-controller", access{"kube-system", "update", "coordination.k8s.io", "leases", ""}),
			Entry("vs-controller: RBAC", "vs-controller", access{"", "create", "rbac.authorization.k8s.io", "clusterrolebindings", ""}),
			Entry("vs-controller: AuthorizationPolicies", "vs-controller", access{"istio-system", "update", "security.istio.io", "authorizationpolicies", ""}),
			Entry("example operator: Secrets", "example-operator", access{"kcp-system", "get", "", "secrets", ""}),
			Entry("example operator: changing Kymas", "example-operator", access{"kcp-system", "patch", kyma, "kymas", ""}),
			// Issue 33: module-sync's RBAC read every Secret in kcp-system;
			// now only the kubeconfig Secrets vs-controller names for it.
			Entry("module-sync: Secrets by name", "module-sync", access{"kcp-system", "get", "", "secrets", ""}),
			Entry("module-sync: listing Secrets", "module-sync", access{"kcp-system", "list", "", "secrets", ""}),
			Entry("module-sync: watching Secrets", "module-sync", access{"kcp-system", "watch", "", "secrets", ""}),
		)

		// Issue 40: only the component writes its member Leases — the
		// policy shard-leases.operator.kyma-project.io asks the authorizer
		// for the verb member on shards/<group>, which each component
		// holds for its own group only.
		It("lets vs-controller and module-sync keep their own shard group's member Leases, and no other's", func() {
			member := func(sa, group string) bool {
				sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
					User:   "system:serviceaccount:kcp-system:" + sa,
					Groups: []string{"system:serviceaccounts", "system:serviceaccounts:kcp-system", "system:authenticated"},
					ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: "kcp-system", Verb: "member", Group: "operator.kyma-project.io", Resource: "shards", Name: group,
					},
				}}
				Expect(kcp.Client.Create(ctx, sar)).To(Succeed())
				return sar.Status.Allowed
			}
			for _, sa := range []string{"vs-controller", "module-sync", "ext-authz", "example-operator"} {
				for _, group := range []string{"vs-controller", "module-sync"} {
					Expect(member(sa, group)).To(Equal(sa == group), "%s a member of shard group %s", sa, group)
				}
			}
		})

		// Issue 33: a Watcher author who may write watchers/status could
		// forge its route condition; the role the manifests ship for
		// authors writes Watchers only.
		It("lets a Watcher author (ClusterRole runtime-watcher-watcher-author) write Watchers but not their status", func() {
			Expect(kcp.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "team-a-watchers", Namespace: "kcp-system"},
				RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runtime-watcher-watcher-author"},
				Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "team-a", Namespace: "kcp-system"}}})).To(Succeed())
			// The RBAC authorizer learns of a new binding through its
			// informer, so the grant becomes visible eventually, not at once
			// (CI at 0208066 asked too early and was refused).
			for _, verb := range []string{"create", "update", "patch", "delete"} {
				Eventually(func() bool { return can("team-a", access{"kcp-system", verb, watcherGroup, "watchers", ""}) }).
					Should(BeTrue(), "%s watchers", verb)
			}
			for _, verb := range []string{"update", "patch"} {
				Expect(can("team-a", access{"kcp-system", verb, watcherGroup, "watchers", "status"})).To(BeFalse(), "%s watchers/status", verb)
			}
		})
	})
})
