package localenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// The ingress gateway (docs/architecture.md §1, "Local"): upstream Envoy
// (testenv.EnvoyBinary) started the way Istio's gateway pod starts it, by
// pilot-agent (`pilot-agent proxy router`, built from the pinned istio
// module) with Istio's own bootstrap template, and configured entirely by
// istiod's xDS: listeners, routes, clusters, endpoints and the Gateway's
// credentialName certificate and client CA (SDS). pilot-agent authenticates
// to istiod with a token of the gateway's ServiceAccount from the KCP API
// server (TokenRequest, audience istio-ca), as the kubelet's projected token
// would; istiod verifies it (TokenReview) and serves the gateway's Secrets
// only to that identity (SubjectAccessReview against the gateway's Role).
//
// What a pod would have and a process here has not: the pod's files, which
// pilot-agent reads relative to its working directory (./var/run/secrets/
// ..., ./etc/istio/proxy), are in <Dir>/gateway; the fixed ports of a pod
// (15000 admin, 15020 agent, 15021 health, 15090 stats) are loopback ports
// chosen like every other (several environments run at once), and bound to
// loopback only (issue 40: a pod's network is its own, a developer's machine
// is not): Envoy's admin is loopback in Istio's bootstrap already, its stats
// and readiness listeners bind the wildcard address there and bind
// loopback here (loopbackBootstrapTemplate), and pilot-agent's status
// server (with /debug/pprof), which binds every interface and has no
// option to narrow that, does not run (the pod annotation
// status.sidecar.istio.io/port: "0", as Istio documents it; nothing here
// probes the gateway through it); the workload
// certificate a pod gets from istiod's CA (off here: nothing in this mesh
// uses mTLS between workloads) is a self-signed one in the files pilot-agent
// reads instead of asking a CA.
const (
	// GatewayServiceAccount is the gateway pod's ServiceAccount (Istio's
	// gateway chart names it so).
	GatewayServiceAccount = "istio-ingressgateway-service-account"
	// gatewayTokenAudience is the audience istiod accepts (its default
	// TOKEN_AUDIENCES).
	gatewayTokenAudience = "istio-ca"
	gatewayTokenTTL      = 24 * time.Hour
	// IstioTrustDomain is the mesh's trust domain.
	IstioTrustDomain = "cluster.local"
)

// gatewayProcess is pilot-agent (and the Envoy it runs) and how to start
// it again.
type gatewayProcess struct {
	mu     sync.Mutex
	p      *process
	dir    string
	binary string
	env    []string
	args   []string
	starts int
	admin  envoy.Admin
}

// GatewayAdmin is Envoy's admin API on loopback: statistics, config_dump.
func (s *System) GatewayAdmin() envoy.Admin { return s.gateway.admin }

// gatewayRBAC is the ServiceAccount and the Role Istio's gateway chart
// gives the gateway: read the Secrets of its namespace (istiod checks it
// before it serves a credentialName over SDS).
func gatewayRBAC() []client.Object {
	return []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: GatewayServiceAccount}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: "istio-ingressgateway-sds"},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"secrets"}, Verbs: []string{"get", "watch", "list"}}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: "istio-ingressgateway-sds"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "istio-ingressgateway-sds"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: GatewayNamespace, Name: GatewayServiceAccount}}},
	}
}

// prepareGateway creates the gateway's ServiceAccount and Role, writes the
// pod's files (token, workload certificate, mesh config) into
// <Dir>/gateway and sets up pilot-agent's command line; adminPort,
// agentPort, healthPort and statsPort are its loopback ports.
func (s *System) prepareGateway(ctx context.Context, mesh []byte, adminPort, agentPort, healthPort, statsPort int) error {
	agent, err := testenv.PilotAgentBinary()
	if err != nil {
		return err
	}
	envoyBin, err := testenv.EnvoyBinary()
	if err != nil {
		return err
	}
	dir := filepath.Join(s.Dir, "gateway")
	template, err := loopbackBootstrapTemplate(dir)
	if err != nil {
		return err
	}
	// The pod's annotations (the downward API file pilot-agent reads):
	// no status server.
	annotations := filepath.Join(dir, "etc", "istio", "pod", "annotations")
	if err := os.MkdirAll(filepath.Dir(annotations), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(annotations, []byte(`status.sidecar.istio.io/port="0"`+"\n"), 0o644); err != nil {
		return err
	}
	for _, obj := range gatewayRBAC() {
		if err := s.KCP.Client.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("gateway %T %s: %w", obj, obj.GetName(), err)
		}
	}
	expires, err := s.writeGatewayToken(ctx, dir)
	if err != nil {
		return err
	}
	// As the kubelet renews a projected token: a new one at half its life
	// (pilot-agent reads the file for every connection to istiod).
	s.goRun(func() error {
		for {
			select {
			case <-s.runCtx.Done():
				return nil
			case <-time.After(max(time.Until(expires)/2, time.Minute)):
			}
			next, err := s.writeGatewayToken(s.runCtx, dir)
			if err != nil {
				s.opts.Log.Error(err, "renewing the gateway's ServiceAccount token")
				next = time.Now().Add(time.Minute)
			}
			expires = next
		}
	})
	if err := writeWorkloadCert(dir); err != nil {
		return err
	}
	meshFile := filepath.Join(dir, "etc", "istio", "config", "mesh")
	if err := os.MkdirAll(filepath.Dir(meshFile), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(meshFile, mesh, 0o644); err != nil {
		return err
	}
	// The pod's proxy config (what the gateway's proxy.istio.io/config and
	// Istio's chart set), over the mesh's defaultConfig.
	proxyConfig, err := yaml.Marshal(map[string]any{
		"discoveryAddress":           s.Istiod.XDSAddr,
		"controlPlaneAuthPolicy":     "NONE", // istiod's plaintext xDS port; the token still authenticates
		"binaryPath":                 envoyBin,
		"configPath":                 filepath.Join(dir, "etc", "istio", "proxy"),
		"proxyBootstrapTemplatePath": template,
		"proxyAdminPort":             adminPort,
		// Validated before the pod's annotation turns the status server
		// off: a port like every other, never bound.
		"statusPort":               agentPort,
		"concurrency":              2,
		"drainDuration":            "1s",
		"terminationDrainDuration": "1s",
		// Istio's bootstrap keeps only a few statistics unless told
		// otherwise; the tests read the listener's ssl.* and the HTTP
		// connection manager's ext_authz.* (a production gateway that wants
		// them sets the same in its proxy.istio.io/config).
		"proxyStatsMatcher": map[string]any{"inclusionRegexps": []string{".*"}},
	})
	if err != nil {
		return err
	}
	labels, err := json.Marshal(GatewayLabels)
	if err != nil {
		return err
	}
	s.gateway = gatewayProcess{dir: dir, binary: agent, admin: envoy.Admin{URL: "http://127.0.0.1:" + strconv.Itoa(adminPort)},
		env: []string{
			"PROXY_CONFIG=" + string(proxyConfig),
			"POD_NAME=" + GatewayProxyName, "POD_NAMESPACE=" + GatewayNamespace, "INSTANCE_IP=" + GatewayProxyIP,
			"SERVICE_ACCOUNT=" + GatewayServiceAccount, "ISTIO_META_CLUSTER_ID=Kubernetes",
			"ISTIO_METAJSON_LABELS=" + string(labels), "ISTIO_META_WORKLOAD_NAME=" + GatewayService,
			"ISTIO_META_OWNER=kubernetes://apis/apps/v1/namespaces/" + GatewayNamespace + "/deployments/" + GatewayService,
			"TRUST_DOMAIN=" + IstioTrustDomain, "JWT_POLICY=third-party-jwt", "CLOUD_PLATFORM=none",
			"ENVOY_STATUS_PORT=" + strconv.Itoa(healthPort), "ENVOY_PROMETHEUS_PORT=" + strconv.Itoa(statsPort),
			"MINIMUM_DRAIN_DURATION=1s",
		},
		args: []string{"proxy", "router", "--domain", GatewayNamespace + ".svc." + IstioClusterDomain,
			"--meshConfig", meshFile, "--proxyLogLevel", "warning", "--log_output_level", "default:info"},
	}
	return nil
}

// loopbackBootstrapTemplate writes Istio's bootstrap template
// (testenv.IstioBootstrapTemplate) into dir with every listener it binds to
// the wildcard address (stats, readiness, the secure metrics ones) bound to
// loopback instead, and returns its path.
func loopbackBootstrapTemplate(dir string) (string, error) {
	src, err := testenv.IstioBootstrapTemplate()
	if err != nil {
		return "", err
	}
	b, err := os.ReadFile(src)
	if err != nil {
		return "", err
	}
	t := strings.NewReplacer("{{ .wildcard }}", "{{ .localhost }}", "{{ .additional_wildcard }}", "{{ .additional_localhost }}").Replace(string(b))
	if strings.Contains(t, "wildcard") {
		return "", fmt.Errorf("%s: a wildcard address this environment does not bind to loopback", src)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "envoy_bootstrap_tmpl.json")
	return path, os.WriteFile(path, []byte(t), 0o644)
}

// writeGatewayToken asks the KCP API server for a token of the gateway's
// ServiceAccount (audience istio-ca), writes it where pilot-agent reads
// the pod's projected token and returns when it expires.
func (s *System) writeGatewayToken(ctx context.Context, dir string) (time.Time, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: GatewayNamespace, Name: GatewayServiceAccount}}
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{gatewayTokenAudience}, ExpirationSeconds: ptr.To(int64(gatewayTokenTTL.Seconds()))}}
	if err := s.KCP.Client.SubResource("token").Create(ctx, sa, tr); err != nil {
		return time.Time{}, fmt.Errorf("TokenRequest for %s/%s: %w", GatewayNamespace, GatewayServiceAccount, err)
	}
	if tr.Status.Token == "" {
		return time.Time{}, errors.New("TokenRequest: no token")
	}
	path := filepath.Join(dir, "var", "run", "secrets", "tokens", "istio-token")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return time.Time{}, err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(tr.Status.Token), 0o600); err != nil {
		return time.Time{}, err
	}
	return tr.Status.ExpirationTimestamp.Time, os.Rename(tmp, path)
}

// writeWorkloadCert writes the gateway's workload certificate where
// pilot-agent looks for one before it asks a CA
// (./var/run/secrets/workload-spiffe-credentials): self-signed, for the
// gateway's SPIFFE identity. Nothing here uses it (no mTLS between
// workloads); it only keeps pilot-agent from asking istiod's CA, which is
// off.
func writeWorkloadCert(dir string) error {
	ca, err := pki.NewCA("gateway-workload-ca")
	if err != nil {
		return err
	}
	leaf, err := ca.Issue(pki.LeafOptions{CommonName: GatewayServiceAccount,
		URIs: []string{"spiffe://" + IstioTrustDomain + "/ns/" + GatewayNamespace + "/sa/" + GatewayServiceAccount}})
	if err != nil {
		return err
	}
	d := filepath.Join(dir, "var", "run", "secrets", "workload-spiffe-credentials")
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	for name, b := range map[string][]byte{"cert-chain.pem": leaf.CertPEM, "key.pem": leaf.KeyPEM, "root-cert.pem": ca.PEM} {
		if err := os.WriteFile(filepath.Join(d, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// SetGatewayUp stops the gateway (pilot-agent and its Envoy: a KCP gateway
// outage) or starts it again and waits until Envoy has istiod's
// configuration and serves it (WaitGatewayServing).
func (s *System) SetGatewayUp(ctx context.Context, up bool) error {
	g := &s.gateway
	g.mu.Lock()
	defer g.mu.Unlock()
	if !up {
		err := g.p.stop()
		g.p = nil
		return err
	}
	if g.p != nil {
		return nil
	}
	name := "gateway"
	if g.starts > 0 {
		name += "-" + strconv.Itoa(g.starts) // a fresh log per start
	}
	g.starts++
	p, err := startProcessIn(s.Dir, g.dir, name, g.binary, nil, g.env, g.args...)
	if err != nil {
		return err
	}
	s.procs = append(s.procs, p)
	g.p = p
	if !s.gatewayCredentials {
		return s.waitGatewayConfig(ctx, p)
	}
	return s.waitGatewayServing(ctx, p)
}

// waitGatewayConfig waits until Envoy has a listener on the gateway's port
// from istiod (active or still warming: its certificates may not exist
// yet).
func (s *System) waitGatewayConfig(ctx context.Context, p *process) error {
	return s.pollGateway(ctx, p, time.Minute, "a listener on port "+strconv.Itoa(s.gatewayPort)+" from istiod", func(c context.Context) (bool, error) {
		dump, err := s.gateway.admin.ConfigDump(c, false)
		if err != nil {
			return false, nil //nolint:nilerr // not up yet
		}
		return strings.Contains(string(dump), `"port_value": `+strconv.Itoa(s.gatewayPort)), nil
	})
}

// waitGatewayServing waits until Envoy's listener on the gateway's port is
// active with the Gateway's certificate and client CA from istiod (SDS
// kubernetes://<credentialName> and its -cacert, each received: a listener
// whose initial fetch timed out is active without them).
func (s *System) waitGatewayServing(ctx context.Context, p *process) error {
	want := []string{"kubernetes://" + GatewayTLSSecret, "kubernetes://" + GatewayTLSSecret + "-cacert"}
	return s.pollGateway(ctx, p, 2*time.Minute, "an active listener on port "+strconv.Itoa(s.gatewayPort)+" with the secrets "+strings.Join(want, ", "), func(c context.Context) (bool, error) {
		ports, err := s.gateway.admin.ListenerPorts(c)
		if err != nil || !slices.Contains(slices.Collect(maps.Values(ports)), s.gatewayPort) {
			return false, nil //nolint:nilerr // not up yet
		}
		dump, err := s.gateway.admin.ConfigDump(c, false)
		if err != nil {
			return false, nil //nolint:nilerr // not up yet
		}
		secrets, err := envoy.Secrets(dump)
		if err != nil {
			return false, err
		}
		for _, name := range want {
			if secrets[name] == "" {
				return false, nil
			}
		}
		return true, nil
	})
}

func (s *System) pollGateway(ctx context.Context, p *process, timeout time.Duration, what string, done func(context.Context) (bool, error)) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := poll(ctx, 50*time.Millisecond, func(c context.Context) (bool, error) {
		select {
		case <-p.done:
			return false, fmt.Errorf("the gateway (pilot-agent) exited (%v); its log ends:\n%s", p.err, p.logTail())
		default:
		}
		return done(c)
	})
	if err != nil {
		return fmt.Errorf("gateway: waiting for %s (logs in %s): %w", what, filepath.Join(s.Dir, "logs"), err)
	}
	return nil
}
