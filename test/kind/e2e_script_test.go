// Package kind tests test/kind/e2e.sh, the kind + Istio e2e driver, on a
// machine without Docker. The test runs the real script with test doubles
// for the tools it drives — docker, kind, kubectl, helm, go test and the
// image targets of make — that cannot run here (no Docker engine, no
// clusters). The doubles record every call, check that each file the script
// hands them exists, and answer as the real tools do for the queries the
// script makes (versions, kubeconfigs); the script's look-up of the pinned
// istio.io/istio (go mod download, go list -m in test/tools/istio) runs the
// real go against the real module cache, so the Istio charts it installs are
// checked to exist there. What the test proves: the prerequisite check names
// exactly what is missing, and the script runs its steps in order with the
// pinned versions, the istiod of test/tools/istio (image and charts), the
// repository's manifests and the e2e suite's environment switch; on failure
// it keeps the clusters and collects diagnostics. What it cannot prove is
// that kind, Istio and cert-manager then behave as documented: that needs
// `make e2e-kind` on a host with Docker.
package kind

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// repoRoot is the repository root (this file is test/kind/…).
func repoRoot(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("no caller information")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// versions reads versions.env.
func versions(t *testing.T) map[string]string {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot(t), "test", "kind", "versions.env"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, "=")
		out[k] = v
	}
	return out
}

// checkPaths is shared by the doubles: every file argument must exist.
const checkPaths = `
check_path() { # $1: a path the real tool would read
	case "$1" in http://* | https://* | -) return 0 ;; esac
	[ -e "$1" ] || { echo "$(basename "$0") double: no such file: $1" >&2; exit 3; }
}
log_call() { printf '%s\n' "$(basename "$0") $*" >>"$STUB_LOG"; }
`

// doubles are the tool doubles, by name. $STUB_* variables steer them.
var doubles = map[string]string{
	"docker": `
log_call "$@"
if [ "$1" = info ]; then
	if [ -n "$STUB_DOCKER_DOWN" ]; then echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2; exit 1; fi
	echo 27.3.1
fi
`,
	"kind": `
log_call "$@"
case "$1 $2" in
"get clusters") printf '%s\n' $STUB_EXISTING_CLUSTERS ;;
"get kubeconfig") printf 'apiVersion: v1\nkind: Config\n' ;;
"create cluster")
	while [ $# -gt 0 ]; do
		case "$1" in
		--config) check_path "$2"; shift ;;
		--image) case " $STUB_WANT_NODE_IMAGES " in *" $2 "*) ;; *) echo "kind double: image $2, want one of $STUB_WANT_NODE_IMAGES" >&2; exit 3 ;; esac; shift ;;
		esac
		shift
	done ;;
esac
`,
	"kubectl": `
log_call "$@"
prev=""
for a in "$@"; do
	case "$prev" in -f | -k | --kubeconfig) check_path "$a" ;; esac
	case "$a" in --from-file=*=*) check_path "${a#*=*=}" ;; esac
	prev="$a"
done
case " $* " in
# The NetworkPolicy probes: refused from another namespace on the guarded
# ports, admitted elsewhere.
*" -n rw-np-probe exec probe "*/9001" "* | *" -n rw-np-probe exec probe "*/8090" "* | *" -n rw-np-probe exec probe "*/8082" "*) exit "${STUB_NP_OPEN:-1}" ;;
# The gateway's status port: readiness and metrics answer, /debug/pprof
# does not (unless STUB_PPROF_OPEN=1).
*" exec probe "*"/15020 "*"/debug/pprof/"*) [ "${STUB_PPROF_OPEN:-0}" = 1 ] && echo "HTTP/1.0 200 OK" || echo "HTTP/1.0 404 Not Found" ;;
*" exec probe "*"/15020 "*) echo "HTTP/1.0 200 OK" ;;
# vs-controller's shards: the replicas last scaled to, one runtime owned in all.
*" scale deployment/vs-controller --replicas="*) all="$*"; echo "${all##*--replicas=}" >"$STUB_LOG.replicas" ;;
*" get pod -l app.kubernetes.io/name=vs-controller --no-headers "*) for _ in $(seq "$(cat "$STUB_LOG.replicas" 2>/dev/null || echo 1)"); do echo vs-controller; done ;;
*" get pod -l app.kubernetes.io/name=vs-controller --field-selector"*) echo vs-controller-0 ;;
*" get --raw "*) echo 'runtime_watcher_shard_owned_runtimes{group="vs-controller",member="vs-controller-0"} 1' ;;
*" get kymas.operator.kyma-project.io --no-headers "*) echo runtime-1 ;;
*" drain "*) echo "error when evicting pods/\"example-operator-0\" -n \"kcp-system\" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget." >&2; exit 1 ;;
*" version --client "*) echo "Client Version: $STUB_KUBECTL_VERSION" ;;
*" create secret "*) printf 'apiVersion: v1\nkind: Secret\n' ;;
*" apply -f - "*) cat >/dev/null ;;
esac
`,
	// helm: every absolute path (values files, kubeconfig, the local
	// charts) must exist.
	"helm": `
log_call "$@"
for a in "$@"; do
	case "$a" in /*) check_path "$a" ;; esac
done
[ "$1" = version ] && echo "v3.19.0+g3d8990f"
exit 0
`,
	// go: the module look-ups run the real go (on the real module cache);
	// go test is recorded.
	"go": `
case "$1 $2" in
"mod download" | "list -m") exec "$STUB_REAL_GO" "$@" ;;
esac
log_call "$@"
if [ "$1" = test ]; then
	for v in E2E_ENV KCP_KUBECONFIG SKR_KUBECONFIG GATEWAY_ADDR GATEWAY_HOST CA_SECRET INGRESS_NAMESPACE INGRESS_DEPLOYMENT OPERATOR_NAMESPACE OPERATOR_SELECTOR KYMA_NAMESPACE RUNTIME_ID SKR_DOMAIN EXT_AUTHZ_DEPLOYMENT VS_CONTROLLER_DEPLOYMENT OPERATOR_DEPLOYMENT WEBHOOK_DEPLOYMENT; do
		printf 'env %s=%s\n' "$v" "$(printenv "$v")" >>"$STUB_LOG"
	done
	check_path "$KCP_KUBECONFIG"
	check_path "$SKR_KUBECONFIG"
	exit "${STUB_SUITE_EXIT:-0}"
fi
`,
	// make: the query of the Makefile's BINARIES runs the real make; the
	// image targets (Docker builds) are recorded.
	"make": `
case " $* " in
*" print-binaries "*) exec "$STUB_REAL_MAKE" "$@" ;;
esac
log_call "$@"
`,
}

// realTools are linked into the doubles' PATH: what the script and make need
// besides the doubles.
var realTools = []string{"bash", "env", "sed", "head", "tr", "grep", "tail", "basename", "dirname", "mkdir", "cat", "sleep", "printenv", "sort", "paste", "sha256sum", "cut", "id", "awk", "seq", "wc"}

// stubNodeImage stands for the node image node-image.sh would build.
const stubNodeImage = "kind.local/node:stub"

type run struct {
	log    string // the calls, one per line
	stderr string
	err    error
}

// runScript runs e2e.sh with the doubles named in tools (all when nil) on
// PATH and the given extra environment.
func runScript(t *testing.T, tools []string, extraEnv ...string) run {
	t.Helper()
	root := repoRoot(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range realTools {
		p, err := exec.LookPath(name)
		if err != nil {
			t.Fatalf("%s is needed to run e2e.sh: %v", name, err)
		}
		if err := os.Symlink(p, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	if tools == nil {
		for name := range doubles {
			tools = append(tools, name)
		}
	}
	for _, name := range tools {
		script := "#!/usr/bin/env bash\n" + checkPaths + doubles[name]
		if err := os.WriteFile(filepath.Join(bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	realMake, err := exec.LookPath("make")
	if err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	realGo, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go is needed: %v", err)
	}
	logFile := filepath.Join(dir, "calls.log")
	cmd := exec.Command(filepath.Join(root, "test", "kind", "e2e.sh"))
	cmd.Dir = root
	cmd.Env = append([]string{
		"PATH=" + bin,
		"HOME=" + dir,
		"STUB_LOG=" + logFile,
		"STUB_REAL_MAKE=" + realMake,
		"STUB_REAL_GO=" + realGo,
		"STUB_WANT_NODE_IMAGES=" + stubNodeImage,
		// kind and helm are the doubles, the node image a stand-in: the
		// builds of build-bins.sh and node-image.sh are not run here.
		"KIND=" + filepath.Join(bin, "kind"),
		"HELM=" + filepath.Join(bin, "helm"),
		"E2E_KIND_NODE_IMAGE=" + stubNodeImage,
		"STUB_KUBECTL_VERSION=" + versions(t)["KUBECTL_VERSION"],
		"E2E_KIND_DIR=" + filepath.Join(dir, "work"),
	}, append(goEnv(t), extraEnv...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.Stdout = &stderr
	err = cmd.Run()
	calls, _ := os.ReadFile(logFile)
	return run{log: string(calls), stderr: stderr.String(), err: err}
}

// goEnv is the environment the real go needs to find the module cache
// and its settings (HOME is the test's): GOMODCACHE, GOENV and every GO*
// variable of this process.
func goEnv(t *testing.T) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMODCACHE", "GOENV").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("go env GOMODCACHE GOENV: %q", out)
	}
	env := []string{"GOMODCACHE=" + lines[0], "GOENV=" + lines[1]}
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "GO") && !strings.HasPrefix(kv, "GOMODCACHE=") && !strings.HasPrefix(kv, "GOENV=") {
			env = append(env, kv)
		}
	}
	return env
}

// istioModule is the istio.io/istio that test/tools/istio/go.mod pins: its
// version and its source in the module cache.
func istioModule(t *testing.T) (version, dir string) {
	t.Helper()
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Version}} {{.Dir}}", "istio.io/istio")
	cmd.Dir = filepath.Join(repoRoot(t), "test", "tools", "istio")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -m istio.io/istio in test/tools/istio: %v", err)
	}
	version, dir, _ = strings.Cut(strings.TrimSpace(string(out)), " ")
	if version == "" || dir == "" {
		t.Fatalf("istio.io/istio of test/tools/istio is not in the module cache (%q): run make istio-assets", out)
	}
	return version, dir
}

// inOrder reports whether each want is a substring of a line of log, the
// lines in the order of want.
func inOrder(t *testing.T, log string, want ...string) {
	t.Helper()
	lines := strings.Split(log, "\n")
	i := 0
	for _, w := range want {
		for i < len(lines) && !strings.Contains(lines[i], w) {
			i++
		}
		if i == len(lines) {
			t.Fatalf("no call %q (after the previous ones) in:\n%s", w, log)
		}
		i++
	}
}

func TestScriptsParse(t *testing.T) {
	scripts, err := filepath.Glob(filepath.Join(repoRoot(t), "test", "kind", "*.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if len(scripts) == 0 {
		t.Fatal("no scripts in test/kind")
	}
	for _, s := range scripts {
		if out, err := exec.Command("bash", "-n", s).CombinedOutput(); err != nil {
			t.Errorf("bash -n %s: %v\n%s", s, err, out)
		}
		info, err := os.Stat(s)
		if err != nil {
			t.Fatal(err)
		}
		if info.Mode()&0o111 == 0 {
			t.Errorf("%s is not executable (make e2e-kind runs it directly)", s)
		}
	}
}

func TestE2EScriptRunsEveryStepWithThePinnedVersions(t *testing.T) {
	r := runScript(t, nil)
	if r.err != nil {
		t.Fatalf("e2e.sh failed: %v\n%s\ncalls:\n%s", r.err, r.stderr, r.log)
	}
	istioVersion, istioSrc := istioModule(t)
	charts := filepath.Join(istioSrc, "manifests", "charts")
	istiod := "runtime-watcher/pilot:" + istioVersion
	proxy := "runtime-watcher/proxyv2:" + istioVersion
	inOrder(t, r.log,
		"docker info",
		"kind create cluster --config "+filepath.Join(repoRoot(t), "test/kind/kcp-cluster.yaml")+" --image "+stubNodeImage,
		"kind create cluster --config "+filepath.Join(repoRoot(t), "test/kind/skr-cluster.yaml")+" --image "+stubNodeImage,
		"kind get kubeconfig --internal --name runtime-watcher-skr",
		// Every image built here: the binaries and cert-manager's controllers ...
		"make -C "+repoRoot(t)+" --no-print-directory images IMAGE_PREFIX=runtime-watcher/ IMAGE_TAG=e2e BINARIES=ext-authz skr-webhook vs-controller listener/example module-sync test/kind/cert-manager",
		"cert-manager.io_certificates.yaml",
		"apply -f "+filepath.Join(repoRoot(t), "test/kind/cert-manager.yaml"),
		// ... the istiod of make run and make test and its gateway proxy, in the KCP ...
		"make -C "+repoRoot(t)+" --no-print-directory istiod-image ISTIOD_IMAGE="+istiod,
		"make -C "+repoRoot(t)+" --no-print-directory istio-proxy-image ISTIO_PROXY_IMAGE="+proxy,
		"kind load docker-image "+istiod+" "+proxy+" --name runtime-watcher-kcp",
		// ... installed with the charts of the same source.
		"upgrade --install istio-base "+filepath.Join(charts, "base")+" ",
		"upgrade --install istiod "+filepath.Join(charts, "istio-control/istio-discovery")+" -f "+filepath.Join(repoRoot(t), "manifests/istio/istiod-values.yaml")+
			" --set image="+istiod+" --set global.proxy.image="+proxy+" -f "+filepath.Join(repoRoot(t), "test/kind/istiod-kind-values.yaml"),
		"upgrade --install istio-ingressgateway "+filepath.Join(charts, "gateway")+" -f "+filepath.Join(repoRoot(t), "test/kind/istio-gateway-values.yaml"),
		"rollout status deployment/istiod",
		"manifests/crds/ -f",
		"apply -k "+filepath.Join(repoRoot(t), "manifests/kcp/overlays/kind"),
		"wait --for=condition=Ready certificate/runtime-watcher-ca",
		"create secret generic kubeconfig-runtime-1 --from-file=config=",
		"apply -k "+filepath.Join(repoRoot(t), "manifests/samples/example-operator"),
		"kyma.yaml",
		"rollout status deployment/skr-webhook",
		"-n rw-np-probe exec probe",
		"'/debug/pprof/'",
		// -v: Ginkgo's summary in the output; a label filter that selects nothing fails.
		// kind-faults: the specs only a cluster runs (pods deleted and restarted).
		"go test -count=1 -timeout 60m ./test/e2e/... -v -ginkgo.label-filter=kind-faults || (!delivery && !module-sync && !takeover && !silent && !shards && !istio && !edge && !adversary && !fairness && !kyma-listener) -ginkgo.fail-on-empty",
		"env E2E_ENV=kind",
		"env GATEWAY_ADDR=127.0.0.1:30443",
		"env GATEWAY_HOST=runtime-watcher-kcp-control-plane.kind",
		"env CA_SECRET=kcp-system/runtime-watcher-ca",
		"env INGRESS_DEPLOYMENT=istio-ingressgateway",
		"env RUNTIME_ID=runtime-1",
		"env SKR_DOMAIN=skr-1.local.example.com",
		"env EXT_AUTHZ_DEPLOYMENT=kcp-system/ext-authz",
		"env VS_CONTROLLER_DEPLOYMENT=kcp-system/vs-controller",
		"env OPERATOR_DEPLOYMENT=kcp-system/example-operator",
		"env WEBHOOK_DEPLOYMENT=kyma-system/skr-webhook",
		"drain runtime-watcher-kcp-control-plane",
		"uncordon runtime-watcher-kcp-control-plane",
		"scale deployment/vs-controller --replicas=3",
		"scale deployment/vs-controller --replicas=1",
		"scale deployment/vs-controller --replicas=3",
		"kind delete cluster --name runtime-watcher-kcp",
		"kind delete cluster --name runtime-watcher-skr",
	)
	// One image per Makefile binary, each into the cluster that runs it.
	for _, load := range []string{
		"kind load docker-image runtime-watcher/ext-authz:e2e --name runtime-watcher-kcp",
		"kind load docker-image runtime-watcher/vs-controller:e2e --name runtime-watcher-kcp",
		"kind load docker-image runtime-watcher/example:e2e --name runtime-watcher-kcp",
		"kind load docker-image runtime-watcher/skr-webhook:e2e --name runtime-watcher-skr",
		"kind load docker-image runtime-watcher/cert-manager:e2e --name runtime-watcher-kcp",
	} {
		if !strings.Contains(r.log, load) {
			t.Errorf("no %q in:\n%s", load, r.log)
		}
	}
	if strings.Contains(r.stderr, "warning:") {
		t.Errorf("warnings although every tool reported its pinned version:\n%s", r.stderr)
	}
}

func TestE2EScriptFailsWhenNetworkPoliciesAreNotEnforced(t *testing.T) {
	checkStopsBeforeTheSuite(t, "STUB_NP_OPEN=0", "NetworkPolicy not enforced",
		"a pod of another namespace reached ext-authz's gRPC port")
}

func TestE2EScriptFailsWhenTheGatewayServesPprof(t *testing.T) {
	checkStopsBeforeTheSuite(t, "STUB_PPROF_OPEN=1", "the gateway serves /debug/pprof",
		"the gateway served /debug/pprof on its status port")
}

// checkStopsBeforeTheSuite runs the script with a double's env set to a
// fault (what) its checks must catch: the script fails, saying says, and
// never runs the suite.
func checkStopsBeforeTheSuite(t *testing.T, env, says, what string) {
	t.Helper()
	r := runScript(t, nil, env)
	if r.err == nil {
		t.Fatalf("e2e.sh succeeded although %s\n%s", what, r.log)
	}
	if !strings.Contains(r.stderr, says) {
		t.Errorf("does not say %q:\n%s", says, r.stderr)
	}
	if strings.Contains(r.log, "go test") {
		t.Errorf("ran the suite after the check that %s failed:\n%s", says, r.log)
	}
}

func TestE2EScriptKeepsTheClustersAndCollectsDiagnosticsWhenTheSuiteFails(t *testing.T) {
	r := runScript(t, nil, "STUB_SUITE_EXIT=1")
	if r.err == nil {
		t.Fatalf("e2e.sh succeeded although the suite failed\n%s", r.log)
	}
	inOrder(t, r.log, "go test", "logs -l app.kubernetes.io/name=ext-authz", "logs -l app.kubernetes.io/name=skr-webhook")
	if strings.Contains(r.log, "kind delete cluster") {
		t.Errorf("clusters deleted after a failure (E2E_KIND_CLEANUP=on-success):\n%s", r.log)
	}
	for _, want := range []string{"diagnostics", "clusters kept", "kind delete cluster --name runtime-watcher-kcp"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("output does not say %q:\n%s", want, r.stderr)
		}
	}
}

func TestE2EScriptNamesEveryMissingPrerequisite(t *testing.T) {
	// kind, helm, kubectl and the node image are built by the scripts; what
	// must be there is a Docker engine (make kind-engine), go and make.
	cases := []struct {
		name    string
		tools   []string
		env     []string
		missing []string // each must be named
		present []string // must not be reported
	}{
		{
			name:    "nothing installed",
			tools:   []string{},
			missing: []string{"docker: not found", "make kind-engine", "go: not found", "make: not found"},
		},
		{
			name:    "Docker daemon down",
			tools:   []string{"docker", "kind", "kubectl", "helm", "go", "make"},
			env:     []string{"STUB_DOCKER_DOWN=1"},
			missing: []string{"the Docker daemon is not reachable", "Cannot connect to the Docker daemon"},
			present: []string{"go:", "make:"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runScript(t, c.tools, c.env...)
			if r.err == nil {
				t.Fatalf("e2e.sh succeeded with missing prerequisites:\n%s", r.stderr)
			}
			if !strings.Contains(r.stderr, "missing prerequisites") {
				t.Fatalf("no list of missing prerequisites:\n%s", r.stderr)
			}
			for _, m := range c.missing {
				if !strings.Contains(r.stderr, m) {
					t.Errorf("does not name %q:\n%s", m, r.stderr)
				}
			}
			listed := ""
			for _, line := range strings.Split(r.stderr, "\n") {
				if strings.HasPrefix(line, "  - ") {
					listed += line + "\n"
				}
			}
			for _, p := range c.present {
				if strings.Contains(listed, "  - "+p) {
					t.Errorf("reports the installed %q as missing:\n%s", p, listed)
				}
			}
			if strings.Contains(r.log, "kind create") || strings.Contains(r.log, "apply") {
				t.Errorf("changed something before the prerequisites were met:\n%s", r.log)
			}
		})
	}
}

// TestKindPathNamesNoRegistry: no file of the kind path names an image
// registry or a download from outside the package registries; every image
// is built here (docs/deploying.md, "Installing on kind").
func TestKindPathNamesNoRegistry(t *testing.T) {
	root := repoRoot(t)
	files := []string{filepath.Join(root, "Dockerfile")}
	for _, dir := range []string{"test/kind", "manifests/kcp/overlays/kind"} {
		err := filepath.WalkDir(filepath.Join(root, dir), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || strings.HasSuffix(p, "_test.go") {
				return err
			}
			files = append(files, p)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	forbidden := []string{"docker.io/", "gcr.io/", "registry.k8s.io/", "quay.io/", "ghcr.io/", "kindest/", "distroless", "/releases/download/", "FROM golang"}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, w := range forbidden {
			if strings.Contains(string(b), w) {
				t.Errorf("%s names %q: the kind path builds every image here", f, w)
			}
		}
	}
}
