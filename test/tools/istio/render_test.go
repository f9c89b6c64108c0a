package istio

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"istio.io/istio/operator/pkg/manifest"
	"istio.io/istio/operator/pkg/render"
	"istio.io/istio/pkg/config/mesh"
	"istio.io/istio/pkg/kube/inject"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// The ingress gateway's pilot-agent serves its status port 15020
// (readiness, the merged metrics Prometheus scrapes) without /debug/pprof
// (issue 40, item 5: the production manifests expose nothing beyond what
// Prometheus scrapes). Two ways to install the gateway, each rendered by
// Istio's own code from the charts built into istio.io/istio.

// istioctl: manifests/istio/istio-operator.yaml's overlay.
func TestIstioOperatorGatewayRunsWithoutProfiling(t *testing.T) {
	sets := renderOperator(t, filepath.Join(repo, "manifests/istio/istio-operator.yaml"))
	var deployments []appsv1.Deployment
	for _, m := range objects(sets, "Deployment", "istio-ingressgateway") {
		var d appsv1.Deployment
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m.Object, &d); err != nil {
			t.Fatal(err)
		}
		deployments = append(deployments, d)
	}
	if len(deployments) != 1 {
		t.Fatalf("istioctl rendered %d Deployments istio-ingressgateway, want 1", len(deployments))
	}
	args := proxyArgs(t, &deployments[0].Spec.Template.Spec)
	if len(args) < 2 || args[0] != "proxy" || args[1] != "router" {
		t.Fatalf("the gateway's istio-proxy does not run pilot-agent proxy router: args %q", args)
	}
	if !slices.Contains(args, "--profiling=false") {
		t.Errorf("the gateway's pilot-agent serves /debug/pprof on its status port: args %q lack --profiling=false", args)
	}
}

// Helm: the injection template watcher-gateway of
// manifests/istio/istiod-values.yaml, named by the gateway pod's annotation
// as in test/kind/istio-gateway-values.yaml, run by Istio's injector (what
// istiod's webhook and istioctl kube-inject run). Its arguments are the
// gateway template's plus --profiling=false: when an Istio bump changes the
// gateway template's arguments, this fails until the copy follows.
func TestGatewayInjectionRunsWithoutProfiling(t *testing.T) {
	var values map[string]any
	readYAML(t, "manifests/istio/istiod-values.yaml", &values)
	meshConfig := values["meshConfig"]
	delete(values, "meshConfig")
	op, err := yaml.Marshal(map[string]any{
		"apiVersion": "install.istio.io/v1alpha1",
		"kind":       "IstioOperator",
		"spec":       map[string]any{"profile": "minimal", "meshConfig": meshConfig, "values": values},
	})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "istiod.yaml")
	if err := os.WriteFile(file, op, 0o600); err != nil {
		t.Fatal(err)
	}
	cms := objects(renderOperator(t, file), "ConfigMap", "istio-sidecar-injector")
	if len(cms) != 1 {
		t.Fatalf("rendered %d ConfigMaps istio-sidecar-injector, want 1", len(cms))
	}
	var cm corev1.ConfigMap
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(cms[0].Object, &cm); err != nil {
		t.Fatal(err)
	}
	cfg, err := inject.UnmarshalConfig([]byte(cm.Data["config"]))
	if err != nil {
		t.Fatal(err)
	}
	templates, err := inject.ParseTemplates(cfg.RawTemplates)
	if err != nil {
		t.Fatal(err)
	}
	vc, err := inject.NewValuesConfig(cm.Data["values"])
	if err != nil {
		t.Fatal(err)
	}

	var gatewayValues struct {
		PodAnnotations map[string]string `json:"podAnnotations"`
	}
	readYAML(t, "test/kind/istio-gateway-values.yaml", &gatewayValues)
	ours := gatewayValues.PodAnnotations["inject.istio.io/templates"]
	if ours != "gateway,watcher-gateway" {
		t.Fatalf("the kind gateway's pods name the injection templates %q, want gateway,watcher-gateway", ours)
	}
	injected := func(templateNames string) []string {
		t.Helper()
		d := &appsv1.Deployment{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
			ObjectMeta: metav1.ObjectMeta{Name: "istio-ingressgateway", Namespace: "istio-system"},
			Spec: appsv1.DeploymentSpec{Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{
					Labels:      map[string]string{"istio": "ingressgateway", "sidecar.istio.io/inject": "true"},
					Annotations: map[string]string{"inject.istio.io/templates": templateNames},
				},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "istio-proxy", Image: "auto"}}},
			}},
		}
		out, err := inject.IntoObject(nil, templates, vc, "", mesh.DefaultMeshConfig(), d, func(w string) { t.Log(w) })
		if err != nil {
			t.Fatalf("inject with %s: %v", templateNames, err)
		}
		return proxyArgs(t, &out.(*appsv1.Deployment).Spec.Template.Spec)
	}
	upstream := injected("gateway")
	if len(upstream) < 2 || upstream[0] != "proxy" || upstream[1] != "router" {
		t.Fatalf("Istio's gateway template does not run pilot-agent proxy router: args %q", upstream)
	}
	want := append(slices.Clone(upstream), "--profiling=false")
	if got := injected(ours); !slices.Equal(got, want) {
		t.Errorf("the gateway injected with %s runs pilot-agent with\n  %q\nwant Istio's gateway arguments plus --profiling=false:\n  %q", ours, got, want)
	}
}

func renderOperator(t *testing.T, file string) []manifest.ManifestSet {
	t.Helper()
	sets, _, err := render.GenerateManifest([]string{file}, nil, false, nil, nil)
	if err != nil {
		t.Fatalf("render %s as istioctl does: %v", file, err)
	}
	return sets
}

func objects(sets []manifest.ManifestSet, kind, name string) []manifest.Manifest {
	var out []manifest.Manifest
	for _, set := range sets {
		for _, m := range set.Manifests {
			if m.GetKind() == kind && m.GetName() == name {
				out = append(out, m)
			}
		}
	}
	return out
}

func proxyArgs(t *testing.T, pod *corev1.PodSpec) []string {
	t.Helper()
	for _, c := range pod.Containers {
		if c.Name == "istio-proxy" {
			return c.Args
		}
	}
	t.Fatalf("no container istio-proxy in %v", pod.Containers)
	return nil
}

func readYAML(t *testing.T, path string, into any) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(b, into); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}
