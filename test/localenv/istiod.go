package localenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	istiosecurityv1 "istio.io/client-go/pkg/apis/security/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// istiod in the local environment (docs/architecture.md §1, "Local"): the
// real Istio control plane, pilot-discovery built from source by `make
// istio-assets`, runs out of cluster against the KCP API server. It reads
// the project's own manifests: the mesh config of
// manifests/istio/istiod-values.yaml and the Gateway and
// AuthorizationPolicy of manifests/kcp/base/gateway.yaml. The gateway
// (Envoy, started by pilot-agent: gateway.go) gets its configuration from
// istiod's xDS.
//
// What a cluster would add and istiod cannot have here is switched off by
// its own flags and environment: no CA (no pods ask for workload
// certificates; the gateway's certificate is a Secret istiod serves over
// SDS), no
// secure xDS port, no webhooks (nothing to inject or validate; the API
// server validates Istio's CRDs by their schemas), no Gateway API.
const (
	// IstioMeshValuesPath and GatewayManifestPath are read, never copied.
	istioMeshValues = "manifests/istio/istiod-values.yaml"
	gatewayManifest = "manifests/kcp/base/gateway.yaml"
	// healthRouteManifest routes the SKR webhooks' health reports to
	// vs-controller (VSControllerHealthService here).
	healthRouteManifest = "manifests/kcp/base/health-route.yaml"
	// GatewayManifestHost is the placeholder host of the Gateway in
	// gatewayManifest that an overlay's settings replace (gatewayHost).
	GatewayManifestHost = "kcp-gateway.example.com"
	// GatewayService is the ingress gateway's Service, as Istio's chart
	// names it; its port 443 leads to the gateway's listener.
	GatewayService = "istio-ingressgateway"
	// ExtAuthzService and ExtAuthzPort are the ext-authz Service of
	// manifests/kcp/base/ext-authz.yaml that the mesh config names.
	ExtAuthzService = "ext-authz"
	// VSControllerHealthService and VSControllerHealthPort: where
	// health-route.yaml sends the health reports.
	VSControllerHealthService = "vs-controller-health"
	VSControllerHealthPort    = 8090
	ExtAuthzPort              = 9001
	// IstioClusterDomain is the cluster domain istiod builds host names with.
	IstioClusterDomain = "cluster.local"
	// GatewayServerHost is the Gateway's server host here: "*", because
	// the gateway's name here, localhost, has no dot and istiod reads a
	// VirtualService host without a dot as a short name in the
	// VirtualService's namespace (localhost.kcp-system.svc.cluster.local),
	// which no Gateway host "localhost" matches. A deployment's gatewayHost
	// is a DNS name with dots; the clients here still connect to and send
	// SNI and Host "localhost" (GatewayHost).
	GatewayServerHost = "*"
	// GatewayProxyName is the gateway "pod" (pilot-agent's POD_NAME).
	GatewayProxyName = "istio-ingressgateway-local"
	// GatewayProxyIP is that pod's address as istiod knows it: the
	// endpoint of the gateway's Service, which tells istiod the pod's
	// labels and its Service's port 443 → target port. Not 127.0.0.1,
	// which every other local Service's endpoint is (istiod would take the
	// gateway for each of them). Nothing connects to it: Envoy's listener
	// binds the wildcard address istiod gives it and is reached on 127.0.0.1.
	GatewayProxyIP = "127.0.0.2"
)

// GatewayLabels are the ingress gateway's pod labels, which the Gateway
// and the AuthorizationPolicy select.
var GatewayLabels = map[string]string{"istio": "ingressgateway", "app": "istio-ingressgateway"}

// Istiod is the running istiod.
type Istiod struct {
	// XDSAddr is its plaintext xDS (ADS) address; DebugURL its HTTP server
	// (/ready, /debug/...); MetricsURL its Prometheus metrics.
	XDSAddr, DebugURL, MetricsURL string
	proc                          *process
}

// MeshConfig is the meshConfig of manifests/istio/istiod-values.yaml (the
// values of Istio's istiod chart), as the YAML istiod reads with --meshConfig.
func MeshConfig() ([]byte, error) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), istioMeshValues))
	if err != nil {
		return nil, err
	}
	var values struct {
		MeshConfig map[string]any `json:"meshConfig"`
	}
	if err := yaml.Unmarshal(b, &values); err != nil {
		return nil, fmt.Errorf("%s: %w", istioMeshValues, err)
	}
	if values.MeshConfig == nil {
		return nil, fmt.Errorf("%s has no meshConfig", istioMeshValues)
	}
	return yaml.Marshal(values.MeshConfig)
}

// GatewayManifests are the Gateway and the AuthorizationPolicy of
// manifests/kcp/base/gateway.yaml, the Gateway's host set to host as an
// overlay's settings (gatewayHost) would.
func GatewayManifests(host string) (*istionetworkingv1.Gateway, *istiosecurityv1.AuthorizationPolicy, error) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), gatewayManifest))
	if err != nil {
		return nil, nil, err
	}
	var gw *istionetworkingv1.Gateway
	var ap *istiosecurityv1.AuthorizationPolicy
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	for {
		var meta metav1.TypeMeta
		var raw map[string]any
		if err := dec.Decode(&raw); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, nil, fmt.Errorf("%s: %w", gatewayManifest, err)
		}
		doc, err := yaml.Marshal(raw)
		if err != nil {
			return nil, nil, err
		}
		if err := yaml.Unmarshal(doc, &meta); err != nil {
			return nil, nil, err
		}
		switch meta.Kind {
		case "Gateway":
			gw = &istionetworkingv1.Gateway{}
			err = yaml.Unmarshal(doc, gw)
		case "AuthorizationPolicy":
			ap = &istiosecurityv1.AuthorizationPolicy{}
			err = yaml.Unmarshal(doc, ap)
		default:
			err = fmt.Errorf("unexpected kind %q", meta.Kind)
		}
		if err != nil {
			return nil, nil, fmt.Errorf("%s: %w", gatewayManifest, err)
		}
	}
	if gw == nil || ap == nil {
		return nil, nil, fmt.Errorf("%s: want a Gateway and an AuthorizationPolicy", gatewayManifest)
	}
	replaced := false
	for _, srv := range gw.Spec.Servers {
		for i, h := range srv.Hosts {
			if h == GatewayManifestHost {
				srv.Hosts[i], replaced = host, true
			}
		}
	}
	if !replaced {
		return nil, nil, fmt.Errorf("%s: the Gateway has no host %s to set", gatewayManifest, GatewayManifestHost)
	}
	return gw, ap, nil
}

// LocalService is a Service of the cluster that is a local address here:
// a ServiceEntry for host, port number and protocol with one static
// endpoint at addr (an EndpointSlice refuses loopback addresses).
type LocalService struct {
	Name, Namespace string
	Port            uint32
	Protocol        string
	Addr            string
	// Labels are the endpoint's (its pod's) labels.
	Labels map[string]string
}

// Host is the Service's cluster host name.
func (l LocalService) Host() string {
	return fmt.Sprintf("%s.%s.svc.%s", l.Name, l.Namespace, IstioClusterDomain)
}

func (l LocalService) serviceEntry() (*istionetworkingv1.ServiceEntry, error) {
	host, port, err := net.SplitHostPort(l.Addr)
	if err != nil {
		return nil, err
	}
	p, err := strconv.ParseUint(port, 10, 32)
	if err != nil {
		return nil, err
	}
	se := &istionetworkingv1.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: l.Name, Namespace: l.Namespace}}
	portName := "port-" + strconv.FormatUint(uint64(l.Port), 10)
	se.Spec.Hosts = []string{l.Host()}
	se.Spec.Location = istioapinetworking.ServiceEntry_MESH_INTERNAL
	se.Spec.Resolution = istioapinetworking.ServiceEntry_STATIC
	se.Spec.Ports = []*istioapinetworking.ServicePort{{Number: l.Port, Name: portName, Protocol: l.Protocol}}
	se.Spec.Endpoints = []*istioapinetworking.WorkloadEntry{{Address: host, Ports: map[string]uint32{portName: uint32(p)}, Labels: l.Labels}}
	return se, nil
}

// applyIstioConfig creates the ServiceEntries of services and the
// Gateway and AuthorizationPolicy of the manifests.
func applyIstioConfig(ctx context.Context, c client.Client, services []LocalService) error {
	for _, svc := range services {
		se, err := svc.serviceEntry()
		if err != nil {
			return fmt.Errorf("service %s: %w", svc.Host(), err)
		}
		if err := c.Create(ctx, se); err != nil {
			return fmt.Errorf("ServiceEntry %s: %w", svc.Host(), err)
		}
	}
	// The route policy first, as manifests/kcp/base has it: every route on
	// the watcher Gateway after it is admitted by it.
	if err := testenv.InstallPolicy(ctx, c, GatewayRoutesPolicyPath()); err != nil {
		return err
	}
	gw, ap, err := GatewayManifests(GatewayServerHost)
	if err != nil {
		return err
	}
	if err := c.Create(ctx, gw); err != nil {
		return fmt.Errorf("the Gateway of %s: %w", gatewayManifest, err)
	}
	if err := c.Create(ctx, ap); err != nil {
		return fmt.Errorf("AuthorizationPolicy of %s: %w", gatewayManifest, err)
	}
	vs, err := HealthRoute()
	if err != nil {
		return err
	}
	if err := c.Create(ctx, vs); err != nil {
		return fmt.Errorf("VirtualService of %s: %w", healthRouteManifest, err)
	}
	return nil
}

// GatewayRoutesPolicyPath is the ValidatingAdmissionPolicy (and its
// binding) that lets only vs-controller and platform writers bind routes to
// the watcher Gateway, and no route touch the identity headers.
func GatewayRoutesPolicyPath() string {
	return filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "base", "gateway-routes-policy.yaml")
}

// HealthRoute is the VirtualService of manifests/kcp/base/health-route.yaml.
func HealthRoute() (*istionetworkingv1.VirtualService, error) {
	b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), healthRouteManifest))
	if err != nil {
		return nil, err
	}
	vs := &istionetworkingv1.VirtualService{}
	if err := yaml.Unmarshal(b, vs); err != nil {
		return nil, fmt.Errorf("%s: %w", healthRouteManifest, err)
	}
	if vs.Kind != "VirtualService" || vs.Name == "" {
		return nil, fmt.Errorf("%s: want one VirtualService", healthRouteManifest)
	}
	return vs, nil
}

// startIstiod runs pilot-discovery against the KCP API server on the three
// loopback addresses given and returns once it is ready.
func (s *System) startIstiod(ctx context.Context, xdsAddr, httpAddr, monitoringAddr string) (*Istiod, error) {
	binary, err := testenv.IstiodBinary()
	if err != nil {
		return nil, err
	}
	mesh, err := MeshConfig()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(s.Dir, "istiod")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	meshFile := filepath.Join(dir, "mesh.yaml")
	if err := os.WriteFile(meshFile, mesh, 0o644); err != nil {
		return nil, err
	}
	env := []string{
		"POD_NAMESPACE=" + GatewayNamespace, "POD_NAME=istiod-local", "REVISION=default",
		// No CA and no certificates of its own: nothing here asks for them.
		"ENABLE_CA_SERVER=false", "PILOT_CERT_PROVIDER=none",
		// No webhooks to patch (and no HTTPS server to serve them).
		"INJECTION_WEBHOOK_CONFIG_NAME=", "VALIDATION_WEBHOOK_CONFIG_NAME=",
		// Istio's networking API only: no Gateway API CRDs are installed.
		"PILOT_ENABLE_GATEWAY_API=false", "PILOT_ENABLE_GATEWAY_API_DEPLOYMENT_CONTROLLER=false",
		"PILOT_ENABLE_GATEWAY_API_GATEWAYCLASS_CONTROLLER=false", "PILOT_ENABLE_GATEWAY_API_STATUS=false",
		// The gateway is upstream Envoy, not Istio's proxy build: without
		// Istio's own extensions istio.metadata_exchange (peer metadata for
		// telemetry) and istio.alpn (ALPN for mTLS to sidecars). Neither
		// decides anything the security model rests on (docs/architecture.md §1).
		"PILOT_ENABLE_METADATA_EXCHANGE=false", "PILOT_ENABLE_ALPN_FILTER=false",
		// The gateway's xDS comes over the plaintext port (there is no CA
		// here to give istiod a serving certificate): authenticate it there
		// too, with the ServiceAccount token pilot-agent sends (TokenReview).
		// Without an identity istiod serves no certificate over SDS.
		"XDS_AUTH_PLAINTEXT=true",
	}
	p, err := s.start("istiod", binary, nil, env, "discovery",
		"--kubeconfig", s.KCP.KubeconfigPath,
		"--meshConfig", meshFile, "--networksConfig", filepath.Join(dir, "mesh-networks.yaml"),
		"--domain", IstioClusterDomain,
		"--grpcAddr", xdsAddr, "--httpAddr", httpAddr, "--monitoringAddr", monitoringAddr,
		"--secureGRPCAddr", "", "--httpsAddr", "",
		"--keepaliveMaxServerConnectionAge", "24h",
		"--log_output_level", "default:info")
	if err != nil {
		return nil, err
	}
	if err := p.waitReady(ctx, "http://"+httpAddr+"/ready", 2*time.Minute); err != nil {
		return nil, fmt.Errorf("istiod: %w", err)
	}
	return &Istiod{XDSAddr: xdsAddr, DebugURL: "http://" + httpAddr, MetricsURL: "http://" + monitoringAddr + "/metrics", proc: p}, nil
}

func (s *System) istioVersion() string {
	v, err := testenv.IstioVersion()
	if err != nil {
		return "(unknown version)"
	}
	return v
}
