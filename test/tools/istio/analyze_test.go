package istio

import (
	"os"
	"path/filepath"
	"testing"

	"istio.io/istio/pkg/config/analysis/analyzers"
	"istio.io/istio/pkg/config/analysis/local"
	"istio.io/istio/pkg/config/resource"
	"sigs.k8s.io/yaml"
)

// repo is the repository root, from this module's folder.
const repo = "../../.."

// The manifests Istio reads, analysed by Istio's own config analysers
// (what `istioctl analyze` runs), offline: the Gateway and the
// AuthorizationPolicy of manifests/kcp/base/gateway.yaml, the ext-authz
// Service they lead to, and the mesh config of
// manifests/istio/istiod-values.yaml. Istio's default ingress gateway
// (Service and Deployment, labelled istio: ingressgateway) stands in for
// the cluster's. Any warning or error fails the test.
var analysed = []string{
	"manifests/kcp/base/gateway.yaml",
	"manifests/kcp/base/ext-authz.yaml",
}

func TestIstioAnalyzersAcceptTheManifests(t *testing.T) {
	var v struct {
		MeshConfig map[string]any `json:"meshConfig"`
	}
	readYAML(t, "manifests/istio/istiod-values.yaml", &v)
	mesh, err := yaml.Marshal(v.MeshConfig)
	if err != nil {
		t.Fatal(err)
	}
	meshFile := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(meshFile, mesh, 0o600); err != nil {
		t.Fatal(err)
	}

	sa := local.NewSourceAnalyzer(analyzers.AllCombined(), resource.Namespace("kcp-system"), resource.Namespace("istio-system"), nil)
	if err := sa.AddFileKubeMeshConfig(meshFile); err != nil {
		t.Fatal(err)
	}
	var sources []local.ReaderSource
	for _, f := range analysed {
		r, err := os.Open(filepath.Join(repo, f))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = r.Close() }()
		sources = append(sources, local.ReaderSource{Name: f, Reader: r})
	}
	if err := sa.AddReaderKubeSource(sources); err != nil {
		t.Fatal(err)
	}
	if err := sa.AddDefaultResources(); err != nil {
		t.Fatal(err)
	}
	cancel := make(chan struct{})
	defer close(cancel)
	res, err := sa.Analyze(cancel)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.ExecutedAnalyzers) == 0 {
		t.Fatal("no analyser ran")
	}
	t.Logf("%d analysers ran, %d skipped", len(res.ExecutedAnalyzers), len(res.SkippedAnalyzers))
	for _, m := range res.Messages {
		t.Errorf("%s", m.String())
	}
}
