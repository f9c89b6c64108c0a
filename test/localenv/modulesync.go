package localenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Module sync in the local environment (docs/architecture.md §4.11): module-sync
// and the example module manager run as processes; the demo Module CRD is
// installed in the SKR.
const (
	// ModuleSyncManager is module-sync's manager name (its event path).
	ModuleSyncManager = "module-sync"
	// ModuleSyncService is the in-cluster name of module-sync's listener.
	ModuleSyncService = "module-sync"
	ModuleSyncPort    = 8082
	// SampleModule is the demo module: its Module CRs are Samples.
	SampleModule = "sample"
	// DriftInterval is module-sync's drift pass here (10m in production):
	// short, so a change in the SKR is corrected within seconds.
	DriftInterval = 3 * time.Second
)

// SampleGVR is the demo Module CR resource (module-sync's --module-resources).
var SampleGVR = schema.GroupVersionResource{Group: "sample.kyma-project.io", Version: "v1alpha1", Resource: "samples"}

// SampleCRDPath is the demo Module CRD.
func SampleCRDPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "samples", "module-sync", "sample-module-crd.yaml")
}

// SampleGrantPath is the demo module's ModuleGrant.
func SampleGrantPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "samples", "module-sync", "sample-modulegrant.yaml")
}

// createSampleGrant creates the demo module's ModuleGrant in the KCP.
func (s *System) createSampleGrant(ctx context.Context) error {
	b, err := os.ReadFile(SampleGrantPath())
	if err != nil {
		return err
	}
	mg := &v1alpha1.ModuleGrant{}
	if err := yaml.UnmarshalStrict(b, mg); err != nil {
		return fmt.Errorf("%s: %w", SampleGrantPath(), err)
	}
	mg.Namespace = KymaNamespace
	if err := s.KCP.Client.Create(ctx, mg); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return s.installSyncResourcePolicy(ctx)
}

// SyncResourcePolicyPath is the ValidatingAdmissionPolicy (and its
// binding) that bounds module managers to their modules' SyncResources.
func SyncResourcePolicyPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "syncresource-policy.yaml")
}

// SyncResourceWriterPolicyPath is the ValidatingAdmissionPolicy (and its
// binding) that makes every SyncResource record who wrote its spec.
func SyncResourceWriterPolicyPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "syncresource-writer-policy.yaml")
}

// ShardLeasePolicyPath is the ValidatingAdmissionPolicy (and its binding)
// that lets only vs-controller and module-sync write their member Leases.
func ShardLeasePolicyPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "shard-lease-policy.yaml")
}

// installSyncResourcePolicy creates the policies of SyncResourcePolicyPath
// and SyncResourceWriterPolicyPath in the KCP, as manifests/kcp/base does
// in production.
func (s *System) installSyncResourcePolicy(ctx context.Context) error {
	for _, path := range []string{SyncResourcePolicyPath(), SyncResourceWriterPolicyPath()} {
		if err := testenv.InstallPolicy(ctx, s.KCP.Client, path); err != nil {
			return err
		}
	}
	return nil
}

// platformWriters are the KCP users module-sync applies SyncResources of
// without a grant naming them (--platform-writers): the admin user of the
// local KCP, as the processes (the example module manager) and the test
// client act.
func (s *System) platformWriters(ctx context.Context) (string, error) {
	var users []string
	for _, c := range []client.Client{s.KCP.Client} {
		self := &authenticationv1.SelfSubjectReview{}
		if err := c.Create(ctx, self); err != nil {
			return "", fmt.Errorf("SelfSubjectReview: %w", err)
		}
		users = append(users, self.Status.UserInfo.Username)
	}
	kubeconfig, err := clientcmd.BuildConfigFromFlags("", s.KCP.KubeconfigPath)
	if err != nil {
		return "", err
	}
	c, err := client.New(kubeconfig, client.Options{Scheme: s.KCP.Client.Scheme()})
	if err != nil {
		return "", err
	}
	self := &authenticationv1.SelfSubjectReview{}
	if err := c.Create(ctx, self); err != nil {
		return "", fmt.Errorf("SelfSubjectReview: %w", err)
	}
	if u := self.Status.UserInfo.Username; u != users[0] {
		users = append(users, u)
	}
	return strings.Join(users, ","), nil
}

// installSampleCRD installs the demo Module CRD in the SKR and waits until
// it is served.
func (s *System) installSampleCRD(ctx context.Context) error {
	b, err := os.ReadFile(SampleCRDPath())
	if err != nil {
		return err
	}
	crd := &apiextensionsv1.CustomResourceDefinition{}
	if err := yaml.UnmarshalStrict(b, crd); err != nil {
		return fmt.Errorf("%s: %w", SampleCRDPath(), err)
	}
	if err := s.SKR.Client.Create(ctx, crd); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	deadline, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	return poll(deadline, 50*time.Millisecond, func(c context.Context) (bool, error) {
		got := &apiextensionsv1.CustomResourceDefinition{}
		if err := s.SKR.Client.Get(c, client.ObjectKeyFromObject(crd), got); err != nil {
			return false, err
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensionsv1.Established && cond.Status == apiextensionsv1.ConditionTrue {
				return true, nil
			}
		}
		return false, nil
	})
}

// startModuleSync starts module-sync (listening on listen) and the example
// module manager.
func (s *System) startModuleSync(ctx context.Context, binaries map[string]string, identityKeySet, listen, health, metrics, mmHealth string) error {
	writers, err := s.platformWriters(ctx)
	if err != nil {
		return err
	}
	s.msBinary = binaries["module-sync"]
	s.msArgs = []string{"--platform-writers", writers,
		"--kubeconfig", s.KCP.KubeconfigPath,
		"--kyma-namespace", KymaNamespace, "--manager", ModuleSyncManager,
		"--module-resources", SampleModule + "=" + SampleGVR.Group + "/" + SampleGVR.Version + "/" + SampleGVR.Resource,
		"--service-name", ModuleSyncService, "--service-port", fmt.Sprint(ModuleSyncPort),
		"--drift-interval", DriftInterval.String(), "--mirror-interval", "1m", "--identity-key-file", identityKeySet}
	s.msListen, s.msHealth, s.msMetrics = listen, health, metrics
	p, err := s.start("module-sync", s.msBinary, nil, nil, append(slices.Clone(s.msArgs),
		"--listen-addr", listen, "--health-probe-bind-address", health, "--metrics-bind-address", metrics)...)
	if err != nil {
		return err
	}
	s.moduleSync = p
	if err := p.waitReady(ctx, "http://"+health+"/readyz", time.Minute); err != nil {
		return err
	}
	s.ModuleSyncMetricsURL = "http://" + metrics + "/metrics"
	s.step("module-sync listening on %s for POST /v2/%s/event (metrics %s)", listen, ModuleSyncManager, s.ModuleSyncMetricsURL)

	p, err = s.start("module-manager", binaries["module-sync/example"], nil, nil,
		"--kubeconfig", s.KCP.KubeconfigPath, "--health-probe-bind-address", mmHealth, "--metrics-bind-address", "0",
		"--kyma-namespace", KymaNamespace, "--module", SampleModule)
	if err != nil {
		return err
	}
	if err := p.waitReady(ctx, "http://"+mmHealth+"/readyz", time.Minute); err != nil {
		return err
	}
	s.step("example module manager (module %q): ModuleConfigs -> SyncResources", SampleModule)
	return nil
}

// restartModuleSync starts the environment's one module-sync process (in
// place of its replicas), its listener the Service's endpoint.
func (s *System) restartModuleSync(ctx context.Context) error {
	p, err := s.start("module-sync", s.msBinary, nil, nil, append(slices.Clone(s.msArgs),
		"--listen-addr", s.msListen, "--health-probe-bind-address", s.msHealth, "--metrics-bind-address", s.msMetrics)...)
	if err != nil {
		return err
	}
	s.moduleSync = p
	if err := p.waitReady(ctx, "http://"+s.msHealth+"/readyz", time.Minute); err != nil {
		return err
	}
	return s.setEndpoints(ctx, ModuleSyncService, ModuleSyncPort, []string{s.msListen})
}

// setEndpoints makes addrs the endpoints of the ServiceEntry name (in
// KymaNamespace) on port, as a Deployment's Service has its ready pods.
func (s *System) setEndpoints(ctx context.Context, name string, port uint32, addrs []string) error {
	se := &istionetworkingv1.ServiceEntry{}
	if err := s.KCP.Client.Get(ctx, client.ObjectKey{Namespace: KymaNamespace, Name: name}, se); err != nil {
		return err
	}
	portName := "port-" + strconv.FormatUint(uint64(port), 10)
	se.Spec.Endpoints = nil
	for _, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			return err
		}
		p, err := strconv.ParseUint(port, 10, 32)
		if err != nil {
			return err
		}
		se.Spec.Endpoints = append(se.Spec.Endpoints, &istioapinetworking.WorkloadEntry{Address: host, Ports: map[string]uint32{portName: uint32(p)}})
	}
	return s.KCP.Client.Update(ctx, se)
}
