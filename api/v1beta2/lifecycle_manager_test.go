package v1beta2_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	k8syaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta1"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Lifecycle Manager's objects, copied with their provenance
// (test/fixtures/lifecycle-manager/README.md).
var lmFixtures = filepath.Join(testenv.RepoRoot(), "test", "fixtures", "lifecycle-manager")

const lmNamespace = "kcp-system"

// readDocs returns every non-empty YAML document of a file.
func readDocs(path string) []map[string]any {
	data, err := os.ReadFile(path)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	dec := k8syaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var out []map[string]any
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return out
		} else {
			ExpectWithOffset(1, err).NotTo(HaveOccurred(), path)
		}
		if len(doc) > 0 {
			out = append(out, doc)
		}
	}
}

// lmWatchers are the Watchers of the fixtures' watchers/ folder, in
// namespace kcp-system (the stock one has none).
func lmWatchers() []*unstructured.Unstructured {
	files, err := filepath.Glob(filepath.Join(lmFixtures, "watchers", "*.yaml"))
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	var out []*unstructured.Unstructured
	for _, f := range files {
		for _, doc := range readDocs(f) {
			u := &unstructured.Unstructured{Object: doc}
			if u.GetKind() != "Watcher" {
				continue
			}
			if u.GetNamespace() == "" {
				u.SetNamespace(lmNamespace)
			}
			out = append(out, u)
		}
	}
	return out
}

// readCRD reads a CRD manifest.
func readCRD(path string) *apiextensionsv1.CustomResourceDefinition {
	data, err := os.ReadFile(path)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	crd := &apiextensionsv1.CustomResourceDefinition{}
	ExpectWithOffset(1, yaml.UnmarshalStrict(data, crd)).To(Succeed())
	return crd
}

func lmCRD() *apiextensionsv1.CustomResourceDefinition {
	return readCRD(filepath.Join(lmFixtures, "crd", "operator.kyma-project.io_watchers.yaml"))
}

func ourCRD() *apiextensionsv1.CustomResourceDefinition {
	return readCRD(filepath.Join(testenv.RepoRoot(), "manifests", "crds", "operator.kyma-project.io_watchers.yaml"))
}

// startAPIServer starts an extra API server with the CRDs of crdDirs only;
// it stops when the current spec or container ends.
func startAPIServer(crdDirs ...string) client.Client {
	assets, err := testenv.AssetsDir()
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	e := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: len(crdDirs) > 0,
		Scheme:                testenv.Scheme(),
	}
	cfg, err := e.Start()
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	DeferCleanup(e.Stop)
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return c
}

var _ = Describe("Lifecycle Manager's Watchers", func() {
	It("are all accepted by our CRD, and SpecProblems names what vs-controller cannot use", func(ctx SpecContext) {
		c := env.Cluster("kcp").Client
		Expect(client.IgnoreAlreadyExists(c.Create(ctx, namespace(lmNamespace)))).To(Succeed())
		// What vs-controller will report (in status) for each; the others
		// have no problem.
		wantProblems := map[string][]string{
			"manager-upper-case": {`spec.manager "Lifecycle-Manager" is not a DNS-1123 label`},
			"manager-with-dot":   {`spec.manager "klm.v2" is not a DNS-1123 label`},
			"no-manager":         {"no manager name: spec.manager and the label operator.kyma-project.io/managed-by are both empty"},
			"empty-service-info": {
				"spec.serviceInfo.name is empty", "spec.serviceInfo.namespace is empty",
				"spec.serviceInfo.port 0 is not in 1..65535",
			},
		}
		watchers := lmWatchers()
		Expect(watchers).To(HaveLen(10), "the fixtures hold 10 Watchers")
		for _, u := range watchers {
			Expect(c.Create(ctx, u)).To(Succeed(), "Watcher %s", u.GetName())
			got := &v1beta2.Watcher{}
			Expect(c.Get(ctx, client.ObjectKeyFromObject(u), got)).To(Succeed())
			problems := got.SpecProblems()
			want := wantProblems[u.GetName()]
			Expect(problems).To(HaveLen(len(want)), "Watcher %s: %q", u.GetName(), problems)
			for i := range want {
				Expect(problems[i]).To(HavePrefix(want[i]), "Watcher %s", u.GetName())
			}
		}
	})

	It("get Lifecycle Manager's status states, including Unmanaged and empty", func(ctx SpecContext) {
		c := env.Cluster("kcp").Client
		for _, state := range []v1beta2.State{v1beta2.StateUnmanaged, "", v1beta2.StateProcessing, v1beta2.StateDeleting} {
			w := validWatcher("state-" + strings.ToLower(string(state)) + "x")
			Expect(c.Create(ctx, w)).To(Succeed())
			w.Status.State = state
			Expect(c.Status().Update(ctx, w)).To(Succeed(), "state %q", state)
		}
	})
})

// Our CRD must accept whatever Lifecycle Manager's accepts. Objects are
// generated from LM's v1beta2 schema (boundary values for every field,
// optional fields left out, wrong types), sent with server-side dry-run to
// an API server with LM's CRD and to one with ours.
var _ = Describe("Our Watcher schema against Lifecycle Manager's", Ordered, func() {
	var lm, ours client.Client
	BeforeAll(func(ctx SpecContext) {
		lm = startAPIServer(filepath.Join(lmFixtures, "crd"))
		ours = env.Cluster("kcp").Client
		for _, c := range []client.Client{lm, ours} {
			Expect(client.IgnoreAlreadyExists(c.Create(ctx, namespace("schema")))).To(Succeed())
		}
	})

	schema := func() *apiextensionsv1.JSONSchemaProps {
		for _, v := range lmCRD().Spec.Versions {
			if v.Name == "v1beta2" {
				return v.Schema.OpenAPIV3Schema
			}
		}
		Fail("LM's CRD has no v1beta2")
		return nil
	}

	// accepted reports whether the server accepted the request; any error
	// other than a validation error fails the test.
	accepted := func(err error) bool {
		if err == nil {
			return true
		}
		ExpectWithOffset(1, apierrors.IsInvalid(err) || apierrors.IsBadRequest(err)).To(BeTrue(), "unexpected error: %v", err)
		return false
	}

	It("accepts every spec LM's schema accepts", func(ctx SpecContext) {
		root := schema()
		specSchema := root.Properties["spec"]
		baseSpec := baseValue(&specSchema)
		variants := []variant{{desc: "no spec", del: true}}
		variants = append(variants, variantsOf(&specSchema, nil)...)
		var lmAccepted, lmRejected, looser int
		var failures []string
		for _, v := range variants {
			obj := map[string]any{
				"apiVersion": v1beta2.GroupVersion.String(), "kind": "Watcher",
				"metadata": map[string]any{"name": "probe", "namespace": "schema"},
			}
			if !v.del || len(v.path) > 0 {
				obj["spec"] = deepCopy(baseSpec)
				v.applyTo(obj, "spec", &specSchema)
			}
			okLM := accepted(lm.Create(ctx, &unstructured.Unstructured{Object: deepCopy(obj).(map[string]any)}, client.DryRunAll))
			okOurs := accepted(ours.Create(ctx, &unstructured.Unstructured{Object: deepCopy(obj).(map[string]any)}, client.DryRunAll))
			switch {
			case okLM && !okOurs:
				failures = append(failures, v.desc)
			case !okLM && okOurs:
				looser++
			}
			if okLM {
				lmAccepted++
			} else {
				lmRejected++
			}
		}
		GinkgoWriter.Printf("spec variants: %d accepted by LM, %d rejected by LM, %d of those accepted by ours\n", lmAccepted, lmRejected, looser)
		Expect(failures).To(BeEmpty(), "accepted by LM's CRD, rejected by ours")
		Expect(lmAccepted).To(BeNumerically(">", 100))
		Expect(lmRejected).To(BeNumerically(">", 10), "the generator also produces invalid objects")
	})

	It("accepts every status LM's schema accepts", func(ctx SpecContext) {
		root := schema()
		statusSchema := root.Properties["status"]
		specSchema := root.Properties["spec"]
		probe := func() *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1beta2.GroupVersion.String(), "kind": "Watcher",
				"metadata": map[string]any{"name": "status-probe", "namespace": "schema"},
				"spec":     baseValue(&specSchema),
			}}
		}
		for _, c := range []client.Client{lm, ours} {
			Expect(c.Create(ctx, probe())).To(Succeed())
		}
		baseStatus := baseValue(&statusSchema)
		var lmAccepted, lmRejected int
		var failures []string
		for _, v := range variantsOf(&statusSchema, nil) {
			obj := map[string]any{"status": deepCopy(baseStatus)}
			v.applyTo(obj, "status", &statusSchema)
			// The object's status is empty, so a merge patch with the whole
			// status sets exactly this status.
			patch, err := jsonMarshal(obj)
			Expect(err).NotTo(HaveOccurred())
			okLM := accepted(lm.Status().Patch(ctx, probe(), client.RawPatch(types.MergePatchType, patch), client.DryRunAll))
			okOurs := accepted(ours.Status().Patch(ctx, probe(), client.RawPatch(types.MergePatchType, patch), client.DryRunAll))
			if okLM && !okOurs {
				failures = append(failures, v.desc)
			}
			if okLM {
				lmAccepted++
			} else {
				lmRejected++
			}
		}
		GinkgoWriter.Printf("status variants: %d accepted by LM, %d rejected by LM\n", lmAccepted, lmRejected)
		Expect(failures).To(BeEmpty(), "accepted by LM's CRD, rejected by ours")
		Expect(lmAccepted).To(BeNumerically(">", 50))
		Expect(lmRejected).To(BeNumerically(">", 5))
	})
})

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// The upgrade from Lifecycle Manager's CRD on a cluster where an older LM
// stored Watchers as v1beta1: status.storedVersions is [v1beta1, v1beta2].
// Replacing the CRD with ours must succeed, and the migration of
// docs/crd-versions.md (read and write every Watcher, then set
// storedVersions) must let storedVersions shrink to [v1beta2].
var _ = Describe("Upgrading from Lifecycle Manager's CRD", Ordered, func() {
	var c client.Client
	const crdName = "watchers.operator.kyma-project.io"
	BeforeAll(func(ctx SpecContext) {
		c = startAPIServer()
		Expect(c.Create(ctx, namespace(lmNamespace))).To(Succeed())
	})

	replaceCRD := func(ctx context.Context, want *apiextensionsv1.CustomResourceDefinition) error {
		cur := &apiextensionsv1.CustomResourceDefinition{}
		if err := c.Get(ctx, client.ObjectKey{Name: crdName}, cur); err != nil {
			return err
		}
		cur.Spec = want.Spec
		return c.Update(ctx, cur)
	}
	storedVersions := func(ctx context.Context) func() ([]string, error) {
		return func() ([]string, error) {
			cur := &apiextensionsv1.CustomResourceDefinition{}
			err := c.Get(ctx, client.ObjectKey{Name: crdName}, cur)
			return cur.Status.StoredVersions, err
		}
	}
	watcherAt := func(version, name string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion(v1beta2.GroupVersion.Group + "/" + version)
		u.SetKind("Watcher")
		u.SetNamespace(lmNamespace)
		u.SetName(name)
		u.SetLabels(map[string]string{"operator.kyma-project.io/managed-by": "lifecycle-manager"})
		Expect(unstructured.SetNestedMap(u.Object, map[string]any{
			"field":           "spec",
			"resourceToWatch": map[string]any{"group": "operator.kyma-project.io", "version": "*", "resource": "kymas"},
			"serviceInfo":     map[string]any{"name": "klm-events", "namespace": lmNamespace, "port": int64(8082)},
			"gateway":         map[string]any{"selector": map[string]any{}},
		}, "spec")).To(Succeed())
		return u
	}

	It("starts from an older LM that stored v1beta1, then LM's current CRD", func(ctx SpecContext) {
		old := lmCRD()
		for i := range old.Spec.Versions {
			v := &old.Spec.Versions[i]
			v.Served, v.Storage = true, v.Name == "v1beta1"
		}
		Expect(c.Create(ctx, old)).To(Succeed())
		Eventually(func() error { return c.Create(ctx, watcherAt("v1beta1", "stored-as-v1beta1")) }).Should(Succeed())

		Expect(replaceCRD(ctx, lmCRD())).To(Succeed())
		Eventually(storedVersions(ctx)).Should(Equal([]string{"v1beta1", "v1beta2"}))
		Eventually(func() error { return c.Create(ctx, watcherAt("v1beta2", "stored-as-v1beta2")) }).Should(Succeed())
	})

	It("refuses a CRD without v1beta1 while storedVersions lists it", func(ctx SpecContext) {
		noV1beta1 := ourCRD()
		noV1beta1.Spec.Versions = slices.DeleteFunc(noV1beta1.Spec.Versions,
			func(v apiextensionsv1.CustomResourceDefinitionVersion) bool {
				return v.Name == v1beta1.GroupVersion.Version
			})
		err := replaceCRD(ctx, noV1beta1)
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("must remain in spec.versions until a storage migration"))
	})

	It("accepts our CRD, which keeps v1beta1 unserved and unstored", func(ctx SpecContext) {
		ours := ourCRD()
		v1 := ours.Spec.Versions[slices.IndexFunc(ours.Spec.Versions,
			func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1beta1" })]
		Expect(v1.Served).To(BeFalse())
		Expect(v1.Storage).To(BeFalse())
		Expect(replaceCRD(ctx, ours)).To(Succeed())
		Expect(storedVersions(ctx)()).To(Equal([]string{"v1beta1", "v1beta2"}))

		By("reading the v1beta1-stored Watcher as v1beta2")
		got := &v1beta2.Watcher{}
		Expect(c.Get(ctx, client.ObjectKey{Namespace: lmNamespace, Name: "stored-as-v1beta1"}, got)).To(Succeed())
		Expect(got.ManagerName()).To(Equal("lifecycle-manager"))
		Expect(got.SpecProblems()).To(BeEmpty())

		By("accepting a Watcher LM's CRD accepts and our old CRD did not")
		edge := watcherAt("v1beta2", "manager-upper-case")
		Expect(unstructured.SetNestedField(edge.Object, "Lifecycle-Manager", "spec", "manager")).To(Succeed())
		Eventually(func() error { return c.Create(ctx, edge) }).Should(Succeed())
	})

	It("lets storedVersions shrink to [v1beta2] after the documented migration", func(ctx SpecContext) {
		// One pass of the migration: read every Watcher and write it back
		// unchanged. The API server skips a write whose stored bytes would
		// not change, so the resourceVersions show which objects were still
		// stored as v1beta1.
		migrate := func() map[string]bool {
			rewritten := map[string]bool{}
			var list v1beta2.WatcherList
			Expect(c.List(ctx, &list)).To(Succeed())
			for i := range list.Items {
				w := &list.Items[i]
				before := w.ResourceVersion
				Expect(c.Update(ctx, w)).To(Succeed())
				rewritten[w.Name] = w.ResourceVersion != before
			}
			return rewritten
		}
		Expect(migrate()).To(Equal(map[string]bool{
			"stored-as-v1beta1": true, "stored-as-v1beta2": false, "manager-upper-case": false,
		}))
		Expect(migrate()).To(HaveEach(BeFalse()), "everything is stored as v1beta2 now")

		cur := &apiextensionsv1.CustomResourceDefinition{}
		Expect(c.Get(ctx, client.ObjectKey{Name: crdName}, cur)).To(Succeed())
		cur.Status.StoredVersions = []string{"v1beta2"}
		Expect(c.Status().Update(ctx, cur)).To(Succeed())
		Expect(storedVersions(ctx)()).To(Equal([]string{"v1beta2"}))

		By("allowing a CRD without v1beta1 from now on")
		noV1beta1 := ourCRD()
		noV1beta1.Spec.Versions = slices.DeleteFunc(noV1beta1.Spec.Versions,
			func(v apiextensionsv1.CustomResourceDefinitionVersion) bool { return v.Name == "v1beta1" })
		Expect(replaceCRD(ctx, noV1beta1)).To(Succeed())
		Expect(c.Get(ctx, client.ObjectKey{Namespace: lmNamespace, Name: "stored-as-v1beta1"}, &v1beta2.Watcher{})).To(Succeed())
	})
})
