// Package testenv starts real Kubernetes API servers (kube-apiserver and etcd
// built from source by `make envtest-assets`, see docs/architecture.md §1) for the
// integration suites, the e2e suite and `make run`. Each named cluster ("kcp",
// "skr", …) is its own API server with every CRD the project needs installed,
// and an admin kubeconfig file that the project's binaries can use.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	watcherv1beta2 "github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
)

// KubernetesVersion is the KCP's Kubernetes: the kube-apiserver,
// kube-controller-manager and etcd that `make envtest-assets` builds
// (Makefile K8S_VERSION); it matches the k8s.io client libraries in go.mod.
const KubernetesVersion = "1.36.3"

// SKRKubernetesVersion is the SKR's Kubernetes: the oldest minor an SKR may
// run (docs/deploying.md, "Versions"), two minors below the KCP's. Every
// cluster whose name starts with "skr" runs the kube-apiserver of this
// version (Makefile SKR_K8S_VERSION), so an old SKR stands beside a new KCP
// in every suite.
const SKRKubernetesVersion = "1.34.2"

// IsSKR reports whether a cluster of that name is an SKR (it runs
// SKRKubernetesVersion's API server): its name starts with "skr".
func IsSKR(name string) bool { return strings.HasPrefix(name, "skr") }

var (
	schemeOnce sync.Once
	scheme     *k8sruntime.Scheme
)

// Scheme knows client-go's types, CRDs, the Watcher API, Istio networking and
// security, and cert-manager.
func Scheme() *k8sruntime.Scheme {
	schemeOnce.Do(func() {
		scheme = k8sruntime.NewScheme()
		utilruntime.Must(clientgoscheme.AddToScheme(scheme))
		utilruntime.Must(apiextensionsv1.AddToScheme(scheme))
		utilruntime.Must(watcherv1beta2.AddToScheme(scheme))
		utilruntime.Must(v1alpha1.AddToScheme(scheme))
		utilruntime.Must(istionetworkingv1.AddToScheme(scheme))
		utilruntime.Must(istiosecurityv1.AddToScheme(scheme))
		utilruntime.Must(certmanagerv1.AddToScheme(scheme))
	})
	return scheme
}

// RepoRoot is the absolute path of the repository root.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// AssetBinaries are the binaries testenv runs from AssetsDir: kube-apiserver
// and etcd for every cluster, kube-controller-manager for
// Cluster.StartControllerManager (make run's shims, test/run, link each).
var AssetBinaries = []string{"kube-apiserver", "etcd", "kube-controller-manager"}

// AssetsDir is where kube-apiserver and etcd are: $KUBEBUILDER_ASSETS when
// set, else bin/k8s/<KubernetesVersion> in the repository. It fails with an
// instruction when the binaries are not there.
func AssetsDir() (string, error) {
	dir := os.Getenv("KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "k8s", KubernetesVersion)
	}
	for _, b := range AssetBinaries[:2] { // kube-controller-manager: checked when started
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s not found in %s: run `make envtest-assets` to build it from source", b, dir)
		}
	}
	return dir, nil
}

// SKRAssetsDir is where the SKR's kube-apiserver is:
// $SKR_KUBEBUILDER_ASSETS when set, else bin/k8s-skr/<SKRKubernetesVersion>
// in the repository (apart from the KCP's complete asset set in bin/k8s/).
// The SKR's etcd is the KCP's, from AssetsDir.
func SKRAssetsDir() (string, error) {
	dir := os.Getenv("SKR_KUBEBUILDER_ASSETS")
	if dir == "" {
		dir = filepath.Join(RepoRoot(), "bin", "k8s-skr", SKRKubernetesVersion)
	}
	if _, err := os.Stat(filepath.Join(dir, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("the SKR's kube-apiserver (v%s) not found in %s: run `make envtest-assets` to build it from source", SKRKubernetesVersion, dir)
	}
	return dir, nil
}

// CRDDirs are the folders whose CRDs every cluster gets.
func CRDDirs() []string {
	root := RepoRoot()
	return []string{
		filepath.Join(root, "manifests", "crds"),
		filepath.Join(root, "manifests", "crds", "kyma-standin"),
		filepath.Join(root, "manifests", "crds", "third_party"),
	}
}

// Cluster is one running API server.
type Cluster struct {
	Name           string
	Config         *rest.Config
	Client         client.Client
	KubeconfigPath string
	// AuditLogPath is the API server's audit log (JSON lines) when started
	// by StartAudited; "" otherwise.
	AuditLogPath string

	env *envtest.Environment
	dir string
	kcm *controllerManager
}

// Env is a set of running clusters.
type Env struct {
	Dir      string
	clusters map[string]*Cluster
	order    []string
	ownDir   bool
}

// Start starts one API server per name, with kubeconfig files in a new
// temporary folder that Stop removes.
func Start(names ...string) (*Env, error) {
	dir, err := os.MkdirTemp("", "runtime-watcher-env-")
	if err != nil {
		return nil, err
	}
	e, err := StartInDir(dir, names...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e.ownDir = true
	return e, nil
}

// StartAudited is Start with every API server writing an audit log
// (Cluster.AuditLogPath) under policy (an audit.k8s.io/v1 Policy): tests
// that check what happened from the API server's own record.
func StartAudited(policy []byte, names ...string) (*Env, error) {
	dir, err := os.MkdirTemp("", "runtime-watcher-env-")
	if err != nil {
		return nil, err
	}
	e, err := startInDir(dir, policy, names...)
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	e.ownDir = true
	return e, nil
}

// StartInDir starts one API server per name and writes <dir>/<name>.kubeconfig
// for each.
func StartInDir(dir string, names ...string) (*Env, error) {
	return startInDir(dir, nil, names...)
}

func startInDir(dir string, audit []byte, names ...string) (*Env, error) {
	if len(names) == 0 {
		return nil, errors.New("testenv: no cluster names given")
	}
	assets, err := AssetsDir()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	e := &Env{Dir: dir, clusters: map[string]*Cluster{}}
	for _, name := range names {
		if _, dup := e.clusters[name]; dup {
			_ = e.Stop()
			return nil, fmt.Errorf("testenv: cluster %q named twice", name)
		}
		c, err := startCluster(name, assets, dir, audit)
		if err != nil {
			_ = e.Stop()
			return nil, fmt.Errorf("testenv: start cluster %q: %w", name, err)
		}
		e.clusters[name] = c
		e.order = append(e.order, name)
	}
	return e, nil
}

func startCluster(name, assets, dir string, audit []byte) (*Cluster, error) {
	env := &envtest.Environment{
		BinaryAssetsDirectory: assets,
		CRDDirectoryPaths:     CRDDirs(),
		ErrorIfCRDPathMissing: true,
		Scheme:                Scheme(),
	}
	var auditLog string
	if audit != nil {
		policy := filepath.Join(dir, name+"-audit-policy.yaml")
		if err := os.WriteFile(policy, audit, 0o600); err != nil {
			return nil, err
		}
		auditLog = filepath.Join(dir, name+"-audit.log")
		args := env.ControlPlane.GetAPIServer().Configure()
		args.Set("audit-policy-file", policy)
		args.Set("audit-log-path", auditLog)
		args.Set("audit-log-format", "json")
		args.Set("audit-log-mode", "blocking")
	}
	if IsSKR(name) {
		skr, err := SKRAssetsDir()
		if err != nil {
			return nil, err
		}
		env.ControlPlane.GetAPIServer().Path = filepath.Join(skr, "kube-apiserver")
	}
	cfg, err := env.Start()
	if err != nil {
		return nil, err
	}
	user, err := env.AddUser(envtest.User{Name: name + "-admin", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	kubeconfig, err := user.KubeConfig()
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	path := filepath.Join(dir, name+".kubeconfig")
	if err := os.WriteFile(path, kubeconfig, 0o600); err != nil {
		_ = env.Stop()
		return nil, err
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme()})
	if err != nil {
		_ = env.Stop()
		return nil, err
	}
	return &Cluster{Name: name, Config: cfg, Client: c, KubeconfigPath: path, AuditLogPath: auditLog, env: env, dir: dir}, nil
}

// Kubeconfig is the cluster's admin kubeconfig (the file at KubeconfigPath),
// as a runtime's kubeconfig Secret carries it for skrclient. With server
// set, its clusters point there instead (an address where nothing listens
// makes an unreachable runtime).
func (c *Cluster) Kubeconfig(server string) ([]byte, error) {
	data, err := os.ReadFile(c.KubeconfigPath)
	if err != nil || server == "" {
		return data, err
	}
	kc, err := clientcmd.Load(data)
	if err != nil {
		return nil, err
	}
	for _, cl := range kc.Clusters {
		cl.Server = server
	}
	return clientcmd.Write(*kc)
}

// Cluster returns the named cluster, or nil.
func (e *Env) Cluster(name string) *Cluster { return e.clusters[name] }

// Stop stops every cluster (in reverse start order; a cluster's
// kube-controller-manager before its API server) and removes the
// kubeconfig folder when Start created it.
func (e *Env) Stop() error {
	var errs []error
	for i := len(e.order) - 1; i >= 0; i-- {
		if err := e.clusters[e.order[i]].kcm.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", e.order[i], err))
		}
		if err := e.clusters[e.order[i]].env.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stop %s: %w", e.order[i], err))
		}
	}
	e.order, e.clusters = nil, map[string]*Cluster{}
	if e.ownDir {
		if err := os.RemoveAll(e.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
