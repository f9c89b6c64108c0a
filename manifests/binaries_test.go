package manifests

import (
	"context"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/seed-c8be168e/runtime-watcher/memlimit"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// makefileBinaries is the Makefile's BINARIES: the folders of the main
// packages that `make build` and `make images` build.
func makefileBinaries() []string {
	GinkgoHelper()
	b, err := os.ReadFile(repoPath("Makefile"))
	Expect(err).NotTo(HaveOccurred())
	m := regexp.MustCompile(`(?m)^BINARIES\s*:?=\s*(.+)$`).FindSubmatch(b)
	Expect(m).NotTo(BeNil(), "the Makefile defines no BINARIES")
	return strings.Fields(string(m[1]))
}

// imageBinary maps an image reference to the Makefile binary it runs, by
// the image's last path element ("runtime-watcher/example:e2e" -> listener/example).
func imageBinary(binaries []string, image string) (string, bool) {
	name := image
	if i := strings.LastIndex(name, "@"); i >= 0 {
		name = name[:i]
	}
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name = name[:i]
	}
	for _, b := range binaries {
		if path.Base(b) == path.Base(name) {
			return b, true
		}
	}
	return "", false
}

// binaryFlags builds a binary, asks it for -h and --help (both must print
// the usage and exit 0) and returns the flags listed, each with its usage
// text.
func binaryFlags(binary string) map[string]string {
	GinkgoHelper()
	bin, err := testenv.BuildBinary(binary)
	Expect(err).NotTo(HaveOccurred())
	var out []byte
	for _, arg := range []string{"-h", "--help"} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		out, err = exec.CommandContext(ctx, bin, arg).CombinedOutput()
		cancel()
		Expect(err).NotTo(HaveOccurred(), "%s %s must exit 0:\n%s", binary, arg, out)
	}
	// flag.PrintDefaults: "  -name type" then the usage, indented by a tab.
	flags := map[string]string{}
	name := ""
	for _, line := range strings.Split(string(out), "\n") {
		if m := regexp.MustCompile(`^\s+--?([A-Za-z0-9][-A-Za-z0-9_.]*)`).FindStringSubmatch(line); m != nil && !strings.HasPrefix(line, "    \t") {
			name = m[1]
			flags[name] = ""
			continue
		}
		if name != "" {
			flags[name] += strings.TrimSpace(line) + " "
		}
	}
	Expect(flags).NotTo(BeEmpty(), "%s -h listed no flags:\n%s", binary, out)
	return flags
}

// deprecated says whether a flag's usage marks it as a deprecated alias.
func deprecated(usage string) bool { return strings.HasPrefix(usage, "deprecated") }

var _ = Describe("the binaries, the Dockerfile and the images", func() {
	It("build every Makefile binary from a main package", func() {
		binaries := makefileBinaries()
		Expect(binaries).NotTo(BeEmpty())
		for _, b := range binaries {
			files, err := filepath.Glob(repoPath(b, "*.go"))
			Expect(err).NotTo(HaveOccurred())
			isMain := false
			for _, f := range files {
				if strings.HasSuffix(f, "_test.go") {
					continue
				}
				src, err := os.ReadFile(f)
				Expect(err).NotTo(HaveOccurred())
				isMain = isMain || regexp.MustCompile(`(?m)^package main\b`).Match(src)
			}
			Expect(isMain).To(BeTrue(), "%s (Makefile BINARIES) has no main package", b)
		}
	})

	It("build any of them in the Dockerfile statically, to run as the user the manifests run as", func() {
		b, err := os.ReadFile(repoPath("Dockerfile"))
		Expect(err).NotTo(HaveOccurred())
		df := string(b)
		Expect(df).To(MatchRegexp(`(?m)^ARG BINARY\s*$`))
		// `make images` builds the binary static, then the Dockerfile puts it
		// on the runtime base (no Go toolchain image, nothing pulled).
		mk, err := os.ReadFile(repoPath("Makefile"))
		Expect(err).NotTo(HaveOccurred())
		recipe := regexp.MustCompile(`(?ms)^images:.*?\n\n`).FindString(string(mk))
		Expect(recipe).To(ContainSubstring("CGO_ENABLED=0"))
		Expect(recipe).To(ContainSubstring("GOFIPS140=$(GOFIPS140)"))
		Expect(recipe).To(ContainSubstring("./$$b"))
		froms := regexp.MustCompile(`(?m)^FROM\s+(?:--platform=\S+\s+)?(\S+)`).FindAllStringSubmatch(df, -1)
		Expect(froms).To(HaveLen(1), "one stage, on the runtime base")
		Expect(froms[0][1]).To(Equal("${BASE_IMAGE}"))
		// The runtime base: only files of Debian's packages on an empty image.
		base, err := os.ReadFile(repoPath("test", "kind", "base.Dockerfile"))
		Expect(err).NotTo(HaveOccurred())
		baseFroms := regexp.MustCompile(`(?m)^FROM\s+(\S+)`).FindAllStringSubmatch(string(base), -1)
		Expect(baseFroms).To(HaveLen(2))
		Expect(baseFroms[1][1]).To(Equal("scratch"))
		Expect(string(base)).To(MatchRegexp(`(?m)^USER 65532:65532\s*$`))
		user := regexp.MustCompile(`(?m)^USER\s+(\d+)(?::(\d+))?\s*$`).FindStringSubmatch(df)
		Expect(user).NotTo(BeNil(), "the runtime stage sets a numeric USER")
		uid, err := strconv.ParseInt(user[1], 10, 64)
		Expect(err).NotTo(HaveOccurred())
		Expect(uid).NotTo(BeZero())

		for _, dir := range workloadBuilds {
			for _, u := range find(mustBuild(dir), "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				Expect(d.Spec.Template.Spec.SecurityContext.RunAsUser).To(HaveValue(Equal(uid)), "%s: Deployment %s", dir, d.Name)
			}
		}

		ignore, err := os.ReadFile(repoPath(".dockerignore"))
		Expect(err).NotTo(HaveOccurred())
		for _, line := range strings.Split(string(ignore), "\n") {
			line = strings.TrimSpace(line)
			Expect(line).NotTo(HavePrefix("manifests"), "vs-controller embeds manifests/skr: it must be in the build context")
		}
	})

	// memlimit.Apply (called by startup.Main) sets Go's soft memory limit to 90 % of MEMORY_LIMIT;
	// without it 90 % of the cgroup limit, and a GOMEMLIMIT of the limit
	// itself (what module-sync had) leaves no headroom before the OOM killer.
	It("give every Go binary of the KCP and the SKR its memory limit as MEMORY_LIMIT, which it reads", func() {
		binaries := makefileBinaries()
		seen := 0
		for _, dir := range append(append([]string{}, kcpOverlays...), "manifests/skr") {
			for _, u := range find(mustBuild(dir), "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				for _, c := range d.Spec.Template.Spec.Containers {
					what := dir + ": Deployment " + d.Name + ", container " + c.Name
					binary, ok := imageBinary(binaries, c.Image)
					Expect(ok).To(BeTrue(), "%s: image %s runs none of the Makefile's binaries", what, c.Image)
					seen++
					var memoryLimit []corev1.EnvVar
					for _, e := range c.Env {
						Expect(e.Name).NotTo(Equal("GOMEMLIMIT"), "%s: set MEMORY_LIMIT (90 %% of it becomes the soft limit), not GOMEMLIMIT", what)
						if e.Name == memlimit.ContainerLimitEnv {
							memoryLimit = append(memoryLimit, e)
						}
					}
					Expect(memoryLimit).To(HaveLen(1), "%s: no %s env", what, memlimit.ContainerLimitEnv)
					e := memoryLimit[0]
					Expect(e.Value).To(BeEmpty(), what)
					Expect(e.ValueFrom).NotTo(BeNil(), what)
					Expect(e.ValueFrom.ResourceFieldRef).NotTo(BeNil(), "%s: %s must come from the downward API", what, e.Name)
					Expect(e.ValueFrom.ResourceFieldRef.Resource).To(Equal("limits.memory"), what)
					Expect(e.ValueFrom.ResourceFieldRef.ContainerName).To(Or(BeEmpty(), Equal(c.Name)), what)
					Expect(e.ValueFrom.ResourceFieldRef.Divisor.IsZero() || e.ValueFrom.ResourceFieldRef.Divisor.Value() == 1).To(BeTrue(), "%s: %s is in bytes", what, e.Name)
					Expect(c.Resources.Limits).To(HaveKey(corev1.ResourceMemory), what)

					// Every binary starts through package startup, which
					// applies the limit.
					main, err := os.ReadFile(repoPath(binary, "main.go"))
					Expect(err).NotTo(HaveOccurred())
					Expect(string(main)).To(ContainSubstring("startup.Main("), "%s: %s does not start through package startup, which reads %s", what, binary, e.Name)
				}
			}
		}
		Expect(seen).To(BeNumerically(">=", 4), "vs-controller, ext-authz, module-sync and the skr-webhook")
		start, err := os.ReadFile(repoPath("startup", "startup.go"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(start)).To(ContainSubstring("memlimit.Apply(os.Getenv"), "package startup does not read %s", memlimit.ContainerLimitEnv)
	})

	It("use, in the kind overlay and the samples, the images that e2e.sh builds and loads", func() {
		script, err := os.ReadFile(repoPath("test/kind/e2e.sh"))
		Expect(err).NotTo(HaveOccurred())
		prefix := regexp.MustCompile(`(?m)^IMAGE_PREFIX="([^"]*)"`).FindSubmatch(script)
		tag := regexp.MustCompile(`(?m)^IMAGE_TAG="([^"]*)"`).FindSubmatch(script)
		Expect(prefix).NotTo(BeNil())
		Expect(tag).NotTo(BeNil())
		binaries := makefileBinaries()
		want := map[string]bool{}
		for _, b := range binaries {
			want[string(prefix[1])+path.Base(b)+":"+string(tag[1])] = true
		}

		var used []string
		for _, dir := range []string{"manifests/kcp/overlays/kind", "manifests/samples/example-operator"} {
			for _, u := range find(mustBuild(dir), "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				for _, c := range d.Spec.Template.Spec.Containers {
					used = append(used, c.Image)
					if img, ok := containerArgs(c)["skr-webhook-image"]; ok {
						used = append(used, img)
					}
				}
			}
		}
		sort.Strings(used)
		Expect(used).To(HaveLen(len(binaries)), "one image per binary: %v", used)
		for _, img := range used {
			Expect(want).To(HaveKey(img), "%s is not an image e2e.sh loads into kind", img)
		}
	})

	It("follow one convention: kubebuilder's flag names, --help and --version exit 0", func() {
		for _, b := range makefileBinaries() {
			flags := binaryFlags(b)
			for _, f := range []string{"metrics-bind-address", "health-probe-bind-address", "version"} {
				Expect(flags).To(HaveKey(f), "%s lacks --%s", b, f)
				Expect(deprecated(flags[f])).To(BeFalse(), "%s --%s", b, f)
			}
			for _, old := range []string{"metrics-addr", "health-addr"} {
				if usage, ok := flags[old]; ok {
					Expect(deprecated(usage)).To(BeTrue(), "%s --%s is only a deprecated alias: %q", b, old, usage)
				}
			}
			bin, err := testenv.BuildBinary(b)
			Expect(err).NotTo(HaveOccurred())
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			out, err := exec.CommandContext(ctx, bin, "--version").Output()
			cancel()
			Expect(err).NotTo(HaveOccurred(), "%s --version must exit 0", b)
			Expect(string(out)).To(MatchRegexp(`^`+regexp.QuoteMeta(path.Base(b))+` \S+ \(go[^)]+\)\n$`), "%s --version", b)
		}
	})

	It("pass every binary only flags it defines, none of them deprecated (each binary built and asked for -h)", func() {
		binaries := makefileBinaries()
		type use struct{ where, flag string }
		uses := map[string][]use{}
		for _, dir := range workloadBuilds {
			for _, u := range find(mustBuild(dir), "Deployment", "") {
				var d appsv1.Deployment
				decode(u, &d)
				for _, c := range d.Spec.Template.Spec.Containers {
					b, ok := imageBinary(binaries, c.Image)
					Expect(ok).To(BeTrue(), "%s: image %s runs none of the Makefile's BINARIES %v", dir, c.Image, binaries)
					for f := range containerArgs(c) {
						uses[b] = append(uses[b], use{dir + " Deployment " + d.Name, f})
					}
				}
			}
		}
		Expect(uses).To(HaveLen(len(binaries)), "every binary is deployed somewhere")
		for b, list := range uses {
			flags := binaryFlags(b)
			for _, u := range list {
				Expect(flags).To(HaveKey(u.flag), "%s passes --%s, which %s does not define", u.where, u.flag, b)
				Expect(deprecated(flags[u.flag])).To(BeFalse(), "%s passes --%s, a deprecated alias: %s", u.where, u.flag, flags[u.flag])
			}
		}
	})
})
