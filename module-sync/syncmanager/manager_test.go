package syncmanager

// The manager's assembly over a fake cluster (test/fakecluster):
// what New gives the manager and what it refuses. module-sync's
// integration and e2e tests start the very same manager against real API
// servers.

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/fakecluster"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func fakeManagers(t *testing.T) *fakecluster.Managers {
	t.Helper()
	s := Scheme()
	fakecluster.AddKyma(s)
	m := &fakecluster.Managers{Cluster: fakecluster.New(t, s), Synced: true}
	newManager = m.New
	t.Cleanup(func() { newManager = ctrl.NewManager })
	return m
}

var serverless = []mirror.ModuleResource{{GroupVersionResource: schema.GroupVersionResource{Group: "operator.kyma-project.io", Version: "v1alpha1", Resource: "serverlesses"}, Module: "serverless"}}

// TestNewManager: the manager caches the Kyma namespace only, Kymas
// trimmed, and no Secret (module-sync reads each kubeconfig Secret by
// name: least privilege); leader election defaults to the Kyma namespace.
func TestNewManager(t *testing.T) {
	m := fakeManagers(t)
	mgr, err := New(context.Background(), &rest.Config{Host: "https://kcp.invalid"}, Options{KymaNamespace: "kcp-system", ModuleResources: serverless,
		SkipNameValidation: true, ListenAddr: "127.0.0.1:0", Manager: "module-sync-assembly"}, &fakecluster.Runtimes{}) // a listener registers its metrics by manager name
	if err != nil || mgr == nil {
		t.Fatalf("New: %v", err)
	}
	if _, ok := m.Cache.DefaultNamespaces["kcp-system"]; !ok || len(m.Cache.DefaultNamespaces) != 1 {
		t.Errorf("cached namespaces %v, want kcp-system only", m.Cache.DefaultNamespaces)
	}
	for obj, by := range m.Cache.ByObject {
		if _, isSecret := obj.(*corev1.Secret); isSecret {
			t.Errorf("Secrets are cached (%+v)", by)
		}
		if obj.GetObjectKind().GroupVersionKind() == identity.NewKyma().GroupVersionKind() && by.Transform == nil {
			t.Error("Kymas cached untrimmed")
		}
	}
	if m.Options.LeaderElectionNamespace != "kcp-system" || m.Options.LeaderElectionID != "module-sync.operator.kyma-project.io" {
		t.Errorf("leader election %q in %q", m.Options.LeaderElectionID, m.Options.LeaderElectionNamespace)
	}

	// The listener's identity modes.
	ca, err := pki.NewCA("ca")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	caFile, notPEM := filepath.Join(dir, "ca.pem"), filepath.Join(dir, "not.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notPEM, []byte("no"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		name string
		edit func(*Options)
		want string // "" accepted
	}{
		{"header", func(o *Options) { o.Identity = "header" }, ""},
		{"san-pinning", func(o *Options) { o.Identity = "san-pinning" }, ""},
		{"san-pinning with a CA", func(o *Options) { o.Identity, o.CAFile = "san-pinning", caFile }, ""},
		{"TLS", func(o *Options) { o.TLSCertFile, o.TLSKeyFile = caFile, caFile }, ""},
		{"a CA file that is not there", func(o *Options) { o.Identity, o.CAFile = "san-pinning", filepath.Join(dir, "absent") }, "client CA file"},
		{"a CA file without PEM", func(o *Options) { o.Identity, o.CAFile = "san-pinning", notPEM }, "no PEM certificate in it"},
		{"unknown identity", func(o *Options) { o.Identity = "bogus" }, `--identity must be header or san-pinning, not "bogus"`},
		{"a certificate without a key", func(o *Options) { o.TLSCertFile = caFile }, "go together"},
		{"no Kyma namespace", func(o *Options) { o.KymaNamespace = "" }, "no Kyma namespace"},
		{"no module resources", func(o *Options) { o.ModuleResources = nil }, "no module resources"},
	} {
		// Each listener registers its metrics by manager name.
		o := Options{KymaNamespace: "kcp-system", ModuleResources: serverless, SkipNameValidation: true, ListenAddr: "127.0.0.1:0",
			Manager: fmt.Sprintf("module-sync-%d", i)}
		tc.edit(&o)
		_, err := New(context.Background(), &rest.Config{Host: "https://kcp.invalid"}, o, nil)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}

// TestDefaults: unset options take the documented defaults; a retry
// ceiling below its base is raised.
func TestDefaults(t *testing.T) {
	o := Options{KymaNamespace: "kcp-system", RetryBase: 10 * time.Minute}
	o.defaults()
	if o.Manager != DefaultManager || o.LeaderElectionNamespace != "kcp-system" || o.MirrorInterval != DefaultMirrorInterval ||
		o.DriftInterval != DefaultDriftInterval || o.RetryMax != 10*time.Minute || o.Workers != 8 ||
		o.SKRTimeout != skrclient.DefaultTimeout || o.PassTimeout != 3*skrclient.DefaultTimeout {
		t.Errorf("defaults %+v", o)
	}
	o = Options{RetryBase: time.Second, RetryMax: time.Minute, Workers: 3, SKRTimeout: time.Second, PassTimeout: time.Hour}
	o.defaults()
	if o.RetryMax != time.Minute || o.Workers != 3 || o.PassTimeout != time.Hour {
		t.Errorf("set options changed: %+v", o)
	}
}

// TestRuntimeClients: module-sync's runtime clients know any kind (a REST
// mapper per runtime), carry its user agent and the timeout.
func TestRuntimeClients(t *testing.T) {
	k := RuntimeClients(7 * time.Second)
	if k.Timeout != 7*time.Second || k.UserAgent != "module-sync" || k.NewMapper == nil || k.Mapper != nil || k.WrapTransport == nil {
		t.Errorf("%+v", k)
	}
	if !k.Scheme.Recognizes(corev1.SchemeGroupVersion.WithKind("ConfigMap")) {
		t.Error("the scheme lacks the core kinds")
	}
}
