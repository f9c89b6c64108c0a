package testenv_test

import (
	"testing"

	"k8s.io/client-go/discovery"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// An old SKR beside a new KCP: a cluster named skr* serves the SKR's
// Kubernetes, every other one the KCP's (docs/deploying.md, "Versions").
func TestClustersServeTheirKubernetesVersion(t *testing.T) {
	env := testenv.StartForTest(t, "kcp", "skr")
	for name, want := range map[string]string{"kcp": testenv.KubernetesVersion, "skr": testenv.SKRKubernetesVersion} {
		dc, err := discovery.NewDiscoveryClientForConfig(env.Cluster(name).Config)
		if err != nil {
			t.Fatal(err)
		}
		v, err := dc.ServerVersion()
		if err != nil {
			t.Fatal(err)
		}
		if v.GitVersion != "v"+want {
			t.Errorf("cluster %s serves Kubernetes %s, want v%s", name, v.GitVersion, want)
		}
	}
	if err := env.Cluster("skr").StartControllerManager(); err == nil {
		t.Error("kube-controller-manager started against the SKR: the KCP's version, newer than the SKR's API server")
	}
}
