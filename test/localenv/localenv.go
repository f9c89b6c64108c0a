// Package localenv brings up the whole of Runtime Watcher on one machine
// without containers (docs/architecture.md §1, "Local"): a KCP and an SKR API
// server (real kube-apiserver and etcd), the project's binaries as real
// processes — ext-authz, vs-controller, skr-webhook, the example operator,
// module-sync and the example module manager —, the real Istio control
// plane (istiod, istiod.go: it reads the manifests' Gateway,
// AuthorizationPolicy and mesh config from the KCP API server), cert-manager's
// own controllers (in-process, test/cmcontrollers) with kube-controller-manager's
// garbage collector and namespace controller, the Istio ingress gateway
// itself — upstream Envoy started by Istio's pilot-agent and configured by
// istiod (gateway.go) —, and in place of the kubelet's Secret volume: the
// SKR's skr-webhook-tls Secret is mirrored into the files the skr-webhook
// reads, as a mounted Secret would be.
//
// `make run` and the e2e suite both use it.
package localenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/listener/example/eventline"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// The sample system: one runtime, one Watcher, one operator.
const (
	KymaNamespace    = "kcp-system"
	GatewayNamespace = "istio-system"
	GatewayName      = "kcp-gateway"
	SKRNamespace     = "kyma-system"
	IssuerName       = "runtime-watcher-ca"
	Manager          = "example-operator"
	WatcherName      = "example-operator"
	RuntimeID        = "runtime-1"
	SKRDomain        = "skr-1.local.example.com"
	// WatchedLabel marks the SKR objects the sample Watcher selects.
	WatchedLabel = "operator.kyma-project.io/watched-by"
	// OperatorService is the in-cluster name of the operator's listener,
	// as the Watcher's serviceInfo names it.
	OperatorService = "example-operator"
	OperatorPort    = 8082
	// GatewayHost is the KCP gateway's host name (its Gateway server host).
	GatewayHost = "localhost"
	// LowLimitClass is the rate-limit class (the value of the Kyma label
	// ratelimit.DefaultClassLabel) that ext-authz limits to LowLimit; every
	// other runtime has ext-authz's default limit.
	LowLimitClass = "e2e-low-limit"
	// RateLimitReportInterval is ext-authz's --rate-limit-report-interval.
	RateLimitReportInterval = 2 * time.Second
)

// LowLimit is the limit of the runtimes of LowLimitClass: low, so that 20
// times it is still far from what the local gateway can take on 2 cores.
var LowLimit = ratelimit.Limit{Rate: 5, Burst: 5}

// ReceivedEvent is one event the example operator reported receiving.
type ReceivedEvent = eventline.Line

// Options of Start.
type Options struct {
	// Dir holds kubeconfigs, certificate files and logs; it must exist.
	Dir string
	// Progress receives one line per step; nil discards them.
	Progress io.Writer
	Log      logr.Logger
	// OperatorReplicas runs that many example operators with leader
	// election behind a per-request round-robin "Service" (default 1: one
	// operator, no leader election) — the KCP shape of docs/architecture.md §4.8.
	OperatorReplicas int
	// HeartbeatInterval is the skr-webhook's --heartbeat-interval (0: its
	// default).
	HeartbeatInterval time.Duration
	// LogAllChecks makes ext-authz write every Check to its decision log
	// (allows too, not a sample), with the path it was asked about
	// (ExtAuthzLog).
	LogAllChecks bool
	// LogReviews makes every skr-webhook it starts log each admission
	// review it answers (ReviewLogFlags), so a test can tell which webhook
	// reviewed which write, and when.
	LogReviews bool
}

// ReviewLogFlags make an skr-webhook log one line per review it answers
// (its handler logs at V(1): manager, operation, kind, namespace, name),
// JSON with RFC 3339 times in nanoseconds.
var ReviewLogFlags = []string{"--zap-log-level=debug", "--zap-time-encoding=rfc3339nano"}

// System is the running local environment.
type System struct {
	Env      *testenv.Env
	KCP, SKR *testenv.Cluster
	Dir      string
	// GatewayAddr is host:port of the gateway (Envoy; what SKRs post to).
	GatewayAddr string
	// WebhookMetricsURL is the skr-webhook's /metrics.
	WebhookMetricsURL string
	// VSControllerMetricsURL is vs-controller's /metrics.
	VSControllerMetricsURL string
	// Events carries every event the operator reported, in order.
	Events <-chan ReceivedEvent
	// ModuleSyncMetricsURL is module-sync's /metrics.
	ModuleSyncMetricsURL string
	// Istiod is the Istio control plane the gateway gets its configuration
	// from (istiod.go).
	Istiod *Istiod

	opts        Options
	runCtx      context.Context // lives until Stop
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	procs       []*process
	gatewayPort int
	certDir     string

	// gateway.go: pilot-agent and Envoy, and how to start them again;
	// gatewayCredentials: the Gateway's certificate and client CA exist
	// (a start waits until Envoy serves them).
	gateway            gatewayProcess
	gatewayCredentials bool

	// delivery.go: the skr-webhook's process and how to start it again,
	// the operators and their Service stand-in.
	webhookMu     sync.Mutex
	webhook       *process
	webhookBinary string
	webhookArgs   []string
	webhookExtra  []string
	webhookHealth string
	webhookAddr   string
	operators     []Operator
	service       *roundRobin

	// takeover.go: vs-controller's process and how to start it again.
	// module-sync: its process (nil while ShardModuleSync replaced it),
	// binary, flags but addresses, and addresses.
	moduleSync                    *process
	msBinary                      string
	msArgs                        []string
	msListen, msHealth, msMetrics string

	vsMu     sync.Mutex
	vs       *process
	vsBinary string
	vsArgs   []string
	vsHealth string
	// vsReports is the one vs-controller's health report listener (the
	// endpoint of VSControllerHealthService while no replicas run).
	vsReports string
	vsStarts  int

	// extauthz.go: ext-authz's process and how to start it again.
	authz extAuthzProcess

	// ports.go: the loopback ports chosen for the binaries, locked until Stop.
	ports portReservation

	// runtimes.go: the API servers of further runtimes (AddRuntime).
	runtimeEnvs []*testenv.Env
}

func (s *System) step(format string, args ...any) {
	if s.opts.Progress != nil {
		fmt.Fprintf(s.opts.Progress, "  • "+format+"\n", args...)
	}
}

// Start brings the system up: it returns once an SKR write can reach the
// operator. Stop undoes everything Start did, also after a failed Start.
func Start(ctx context.Context, o Options) (s *System, err error) {
	runCtx, cancel := context.WithCancel(context.Background())
	s = &System{opts: o, Dir: o.Dir, runCtx: runCtx, cancel: cancel, certDir: filepath.Join(o.Dir, "skr-webhook-tls")}
	defer func() {
		if err != nil {
			_ = s.Stop()
			s = nil
		}
	}()

	binaries := map[string]string{}
	for _, b := range testenv.Binaries {
		path, err := testenv.BuildBinary(b)
		if err != nil {
			return s, err
		}
		binaries[b] = path
	}
	s.step("binaries built: ext-authz, vs-controller, skr-webhook, example operator, module-sync, example module manager")

	if s.Env, err = testenv.StartInDir(o.Dir, "kcp", "skr"); err != nil {
		return s, err
	}
	s.KCP, s.SKR = s.Env.Cluster("kcp"), s.Env.Cluster("skr")
	s.step("KCP API server %s (Kubernetes %s) and SKR API server %s (Kubernetes %s) are up", s.KCP.Config.Host, testenv.KubernetesVersion, s.SKR.Config.Host, testenv.SKRKubernetesVersion)

	for _, ns := range []string{KymaNamespace, GatewayNamespace} {
		if err := s.KCP.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil && !apierrors.IsAlreadyExists(err) {
			return s, err
		}
	}
	// Only vs-controller and module-sync write their member Leases
	// (manifests/kcp/base/shard-lease-policy.yaml); the processes here act
	// as the KCP's admin, which the policy lets through as it lets cluster
	// admins.
	if err := testenv.InstallPolicy(ctx, s.KCP.Client, ShardLeasePolicyPath()); err != nil {
		return s, err
	}

	// cert-manager and the PKI of manifests/kcp/base/pki.yaml: the runtime
	// CA is a namespaced CA Issuer in vs-controller's namespace (only
	// Certificates there can use it, docs/architecture.md §4.9), the
	// gateway's server certificate comes from its own CA in istio-system.
	if err := s.KCP.StartControllerManager(); err != nil {
		return s, err
	}
	s.step("kube-controller-manager (%s) up for the KCP", strings.Join(testenv.ControllerManagerControllers, ", "))
	for _, obj := range pkiObjects() {
		if err := s.KCP.Client.Create(ctx, obj); err != nil {
			return s, fmt.Errorf("PKI %T %s: %w", obj, obj.GetName(), err)
		}
	}
	cmLog, cmLogFile, err := fileLogger(s.Dir, "cert-manager")
	if err != nil {
		return s, err
	}
	s.goRun(func() error {
		defer cmLogFile.Close()
		return cmcontrollers.Run(runCtx, cmcontrollers.Options{Kubeconfig: s.KCP.KubeconfigPath, Log: cmLog})
	})
	s.step("cert-manager's controllers issue Certificates (log: %s): runtime CA in %s, gateway CA in %s",
		filepath.Join(s.Dir, "logs", "cert-manager.log"), KymaNamespace, GatewayNamespace)

	if err := s.installSampleCRD(ctx); err != nil {
		return s, err
	}
	s.step("installed the demo Module CRD %s in the SKR", SampleGVR.GroupResource())
	if err := s.createSampleGrant(ctx); err != nil {
		return s, err
	}
	s.step("granted module %q its kinds in the SKR (%s)", SampleModule, SampleGrantPath())

	replicas := max(o.OperatorReplicas, 1)
	ports, err := s.ports.reserve(17 + 3*replicas)
	if err != nil {
		return s, err
	}
	istioPorts, err := s.ports.reserve(7) // istiod: xDS, HTTP, metrics; gateway: Envoy admin, agent, health, stats
	if err != nil {
		return s, err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(ports[i]) }
	authzGRPC, authzHealth := addr(0), addr(1)
	opListen, opHealth := addr(2), addr(3)
	vsHealth := addr(4)
	s.gatewayPort = ports[5]
	webhookListen, webhookHealth := addr(6), addr(7)
	authzMetrics, opMetrics, webhookMetrics := addr(8), addr(9), addr(10)
	msListen, msHealth, msMetrics, mmHealth := addr(11), addr(12), addr(13), addr(14)
	vsHealthReports, vsMetrics := addr(15), addr(16)
	s.vsReports = vsHealthReports
	s.VSControllerMetricsURL = "http://" + vsMetrics + "/metrics"
	s.GatewayAddr = net.JoinHostPort(GatewayHost, strconv.Itoa(s.gatewayPort))
	s.WebhookMetricsURL = "http://" + webhookMetrics + "/metrics"

	// ext-authz signs with the key of the identity signing Certificate,
	// every listener and vs-controller's health port verify with its
	// tls.crt: the Secret's keys in files, as the pods mount it.
	if err := s.mirrorSecret(ctx, runCtx, s.IdentityKeyDir(), func(c context.Context) (*corev1.Secret, error) {
		var sec corev1.Secret
		err := s.KCP.Client.Get(c, client.ObjectKey{Namespace: KymaNamespace, Name: IdentitySigningName}, &sec)
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return &sec, err
	}, fmt.Sprintf("Secret %s/%s (cert-manager log: %s)", KymaNamespace, IdentitySigningName, filepath.Join(s.Dir, "logs", "cert-manager.log"))); err != nil {
		return s, err
	}
	identityKeySet := filepath.Join(s.IdentityKeyDir(), "tls.crt")
	s.step("cert-manager issued the identity signing key %s/%s (Ed25519)", KymaNamespace, IdentitySigningName)

	// Every binary is configured by flags only (--kubeconfig for the KCP).
	s.authz = extAuthzProcess{binary: binaries["ext-authz"], health: authzHealth, args: []string{
		"--kubeconfig", s.KCP.KubeconfigPath, "--grpc-addr", authzGRPC, "--health-probe-bind-address", authzHealth,
		"--metrics-bind-address", authzMetrics, "--kyma-namespace", KymaNamespace,
		"--identity-signing-key-file", filepath.Join(s.IdentityKeyDir(), "tls.key"),
		"--rate-limit-class-label", ratelimit.DefaultClassLabel, "--rate-limit-classes", LowLimitClass + "=" + LowLimit.String(),
		"--rate-limit-report-interval", RateLimitReportInterval.String()}}
	if o.LogAllChecks {
		s.authz.args = append(s.authz.args, "--decision-log-allow-sample-rate", "1", "--decision-log-max-lines-per-second", "10000")
	}
	if err := s.SetExtAuthzUp(ctx, true); err != nil {
		return s, err
	}
	s.step("ext-authz ready (gRPC %s, metrics http://%s/metrics)", authzGRPC, authzMetrics)

	events := make(chan ReceivedEvent, 4096)
	s.Events = events
	if replicas == 1 {
		s.operators = []Operator{{Listen: opListen, Health: opHealth, Metrics: opMetrics}}
	} else {
		for i := range replicas {
			s.operators = append(s.operators, Operator{Listen: addr(17 + 3*i), Health: addr(18 + 3*i), Metrics: addr(19 + 3*i)})
		}
	}
	var opProcs []*process
	for i, op := range s.operators {
		pr, pw := io.Pipe()
		s.goRun(func() error { return readEvents(pr, events) })
		name := "example-operator"
		args := []string{"--kubeconfig", s.KCP.KubeconfigPath, "--listen-addr", op.Listen, "--manager", Manager, "--kyma-namespace", KymaNamespace,
			"--health-probe-bind-address", op.Health, "--metrics-bind-address", op.Metrics, "--print", "json",
			"--identity-key-file", identityKeySet}
		if replicas > 1 {
			name = fmt.Sprintf("example-operator-%d", i)
			args = append(args, "--leader-elect")
		}
		p, err := s.start(name, binaries["listener/example"], pw, nil, args...)
		if err != nil {
			return s, err
		}
		opProcs = append(opProcs, p)
	}
	// Every replica becomes ready, leader or not (the listener serves on
	// every replica).
	for i, op := range s.operators {
		if err := opProcs[i].waitReady(ctx, "http://"+op.Health+"/readyz", time.Minute); err != nil {
			return s, err
		}
	}
	if replicas > 1 {
		if s.service, err = startRoundRobin(runCtx, opListen, s.operators); err != nil {
			return s, err
		}
		s.step("%d example operators (leader election) ready behind the Service stand-in %s", replicas, opListen)
	}
	s.step("example operator listening on %s for POST %s", opListen, contract.EventPath(Manager))

	if err := s.startModuleSync(ctx, binaries, identityKeySet, msListen, msHealth, msMetrics, mmHealth); err != nil {
		return s, err
	}

	if err := s.startGateway(ctx, []LocalService{
		{Name: ExtAuthzService, Namespace: KymaNamespace, Port: ExtAuthzPort, Protocol: "GRPC", Addr: authzGRPC},
		{Name: OperatorService, Namespace: KymaNamespace, Port: OperatorPort, Protocol: "HTTP", Addr: opListen},
		{Name: ModuleSyncService, Namespace: KymaNamespace, Port: ModuleSyncPort, Protocol: "HTTP", Addr: msListen},
		{Name: VSControllerHealthService, Namespace: KymaNamespace, Port: VSControllerHealthPort, Protocol: "HTTP", Addr: vsHealthReports},
		{Name: GatewayService, Namespace: GatewayNamespace, Port: 443, Protocol: "HTTPS", Addr: net.JoinHostPort(GatewayProxyIP, strconv.Itoa(s.gatewayPort)), Labels: GatewayLabels},
	}, istioPorts); err != nil {
		return s, err
	}
	s.step("gateway (Envoy %s started by pilot-agent, admin %s) has its listener on %s from istiod", testenv.EnvoyVersion, s.gateway.admin.URL, s.GatewayAddr)

	s.vsBinary, s.vsHealth = binaries["vs-controller"], vsHealth
	s.vsArgs = []string{
		"--kubeconfig", s.KCP.KubeconfigPath,
		"--metrics-bind-address", vsMetrics, "--health-probe-bind-address", vsHealth,
		"--health-report-bind-address", vsHealthReports, "--identity-key-file", identityKeySet,
		"--kyma-namespace", KymaNamespace, "--gateway-namespace", GatewayNamespace, "--skr-namespace", SKRNamespace,
		"--issuer-name", IssuerName, "--issuer-kind", "Issuer",
		"--kcp-gateway-host", s.GatewayAddr,
		"--skr-webhook-url", "https://localhost:" + strconv.Itoa(ports[6]),
		"--skr-webhook-extra-dns-names", "localhost",
		"--watcher-debounce", "100ms",
		"--ca-secret", KymaNamespace + "/" + IssuerName,
		"--gateway-ca-secret", GatewayNamespace + "/" + GatewayCAName,
		"--gateway-client-ca-secret", GatewayNamespace + "/" + GatewayTLSSecret + "-cacert",
		"--gateway-certificate", GatewayNamespace + "/" + GatewayTLSSecret,
		"--ca-poll-interval", "1s", "--ca-settle", CASettle.String(),
		"--certificate-duration", LeafDuration.String(), "--certificate-renew-before", LeafRenewBefore.String(),
		// A take-over from Lifecycle Manager (e2e spec takeover) switches
		// admission once the webhook process serves the runtime's
		// certificate: there are no pods to be ready.
		"--skr-webhook-ready-url", "https://localhost:" + strconv.Itoa(ports[6]) + "/readyz",
	}
	if err := s.RestartVSController(ctx); err != nil {
		return s, err
	}
	s.step("vs-controller ready")

	if err := s.applySamples(ctx); err != nil {
		return s, err
	}
	s.step("created Watcher %s/%s, Kyma %s/%s (skr-domain %s) and its kubeconfig Secret",
		KymaNamespace, WatcherName, KymaNamespace, RuntimeID, SKRDomain)

	if err := s.mirrorWebhookSecret(ctx, runCtx); err != nil {
		return s, err
	}
	s.step("vs-controller obtained the runtime certificate and applied the webhook bundle to the SKR")
	s.gatewayCredentials = true
	if err := s.waitGatewayServing(ctx, s.gateway.p); err != nil {
		return s, fmt.Errorf("gateway credentials from %s/%s and its -cacert: %w", GatewayNamespace, GatewayTLSSecret, err)
	}
	s.step("gateway serves with %s/%s and the client CA bundle vs-controller wrote (SDS from istiod)", GatewayNamespace, GatewayTLSSecret)

	caFile := filepath.Join(s.certDir, "ca.crt")
	s.webhookBinary, s.webhookHealth, s.webhookAddr = binaries["skr-webhook"], webhookHealth, webhookListen
	s.webhookArgs = []string{
		"--listen-addr", webhookListen, "--health-probe-bind-address", webhookHealth, "--metrics-bind-address", webhookMetrics,
		"--tls-cert-file", filepath.Join(s.certDir, "tls.crt"), "--tls-key-file", filepath.Join(s.certDir, "tls.key"),
		"--ca-file", caFile, "--kcp-addr", s.GatewayAddr, "--drain-timeout", "2s",
	}
	extra, err := s.deliveryFlags(o)
	if err != nil {
		return s, err
	}
	s.webhookArgs = append(s.webhookArgs, extra...)
	if o.LogReviews {
		s.webhookArgs = append(s.webhookArgs, ReviewLogFlags...)
	}
	if err := s.StartWebhook(ctx); err != nil {
		return s, err
	}
	s.step("skr-webhook serving the SKR API server on %s, delivering to %s", webhookListen, s.GatewayAddr)
	if err := s.waitAdmission(ctx); err != nil {
		return s, fmt.Errorf("the SKR API server does not call the skr-webhook: %w", err)
	}
	s.step("the SKR API server calls the skr-webhook")
	return s, nil
}

func (s *System) start(name, binary string, stdout io.Writer, env []string, args ...string) (*process, error) {
	p, err := startProcess(s.Dir, name, binary, stdout, env, args...)
	if err != nil {
		return nil, err
	}
	s.procs = append(s.procs, p)
	return p, nil
}

func (s *System) goRun(f func() error) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		if err := f(); err != nil && !errors.Is(err, context.Canceled) {
			s.opts.Log.Error(err, "background part of the local environment stopped")
		}
	}()
}

// readEvents parses the operator's JSON lines until r closes.
func readEvents(r io.Reader, out chan<- ReceivedEvent) error {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		ev, ok := eventline.Parse(sc.Bytes())
		if !ok {
			continue // not an event line
		}
		select {
		case out <- ev:
		default: // a consumer that stopped reading must not stall the operator
		}
	}
	return sc.Err()
}

// startGateway registers the services istiod routes to (ServiceEntries
// with local endpoints), applies the Gateway and AuthorizationPolicy of
// the manifests, starts istiod and then the gateway (pilot-agent and Envoy,
// gateway.go), and returns once Envoy has its listener from istiod.
func (s *System) startGateway(ctx context.Context, services []LocalService, istioPorts []int) error {
	if err := applyIstioConfig(ctx, s.KCP.Client, services); err != nil {
		return err
	}
	addr := func(i int) string { return "127.0.0.1:" + strconv.Itoa(istioPorts[i]) }
	start := time.Now()
	var err error
	if s.Istiod, err = s.startIstiod(ctx, addr(0), addr(1), addr(2)); err != nil {
		return err
	}
	s.step("istiod %s ready in %s (xDS %s, debug %s, metrics %s)", s.istioVersion(), time.Since(start).Round(time.Millisecond), s.Istiod.XDSAddr, s.Istiod.DebugURL, s.Istiod.MetricsURL)
	mesh, err := MeshConfig()
	if err != nil {
		return err
	}
	if err := s.prepareGateway(ctx, mesh, istioPorts[3], istioPorts[4], istioPorts[5], istioPorts[6]); err != nil {
		return err
	}
	start = time.Now()
	if err := s.SetGatewayUp(ctx, true); err != nil {
		return err
	}
	s.step("istiod pushed the gateway's configuration to Envoy in %s", time.Since(start).Round(time.Millisecond))
	return nil
}

// GatewayTLS returns a client TLS config that trusts the gateway's CA (read
// from the KCP now), with the given client certificate (nil for none).
func (s *System) GatewayTLS(ctx context.Context, cert *tls.Certificate) (*tls.Config, error) {
	roots, err := GatewayRoots(ctx, s.KCP.Client)
	if err != nil {
		return nil, err
	}
	c := &tls.Config{RootCAs: roots, ServerName: GatewayHost, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	return c, nil
}

// applySamples creates the Watcher, the Kyma and its kubeconfig
// Secret in the KCP.
func (s *System) applySamples(ctx context.Context) error {
	if err := s.KCP.Client.Create(ctx, SampleWatcher()); err != nil {
		return err
	}
	return s.createRuntime(ctx, RuntimeID, SKRDomain, s.SKR.KubeconfigPath)
}

// createRuntime creates a runtime's kubeconfig Secret (the SKR API server
// of kubeconfigPath) and its Kyma (skr-domain domain) in the KCP.
func (s *System) createRuntime(ctx context.Context, id, domain, kubeconfigPath string) error {
	c := s.KCP.Client
	kubeconfig, err := os.ReadFile(kubeconfigPath)
	if err != nil {
		return err
	}
	// Labelled as docs/operations.md recommends: vs-controller caches and
	// watches it (an unlabelled one is read uncached at every pass).
	if err := c.Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: skrclient.SecretName(id), Namespace: KymaNamespace,
			Labels: map[string]string{contract.LabelPartOf: contract.PartOf}},
		Data: map[string][]byte{skrclient.SecretKey: kubeconfig},
	}); err != nil {
		return err
	}
	kyma := &unstructured.Unstructured{}
	kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
	kyma.SetNamespace(KymaNamespace)
	kyma.SetName(id)
	kyma.SetLabels(map[string]string{contract.LabelRuntimeID: id})
	kyma.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
	if err := unstructured.SetNestedField(kyma.Object, "regular", "spec", "channel"); err != nil {
		return err
	}
	return c.Create(ctx, kyma)
}

// SampleWatcher is the Watcher of the example operator: Kyma CRs in every
// SKR with the watched-by label, spec changes, through the default gateway;
// heartbeats opted in (the example operator is on our listener).
func SampleWatcher() *v1beta2.Watcher {
	return &v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Name: WatcherName, Namespace: KymaNamespace},
		Spec: v1beta2.WatcherSpec{
			ServiceInfo:     v1beta2.Service{Name: OperatorService, Namespace: KymaNamespace, Port: OperatorPort},
			Manager:         Manager,
			LabelsToWatch:   map[string]string{WatchedLabel: Manager},
			ResourceToWatch: v1beta2.WatchableGVR{Group: v1beta2.GroupVersion.Group, Version: "*", Resource: "kymas"},
			Field:           v1beta2.SpecField,
			Gateway: v1beta2.GatewayConfig{LabelSelector: metav1.LabelSelector{
				MatchLabels: map[string]string{"operator.kyma-project.io/watcher-gateway": "default"},
			}},
			Heartbeats: true,
		},
	}
}

// mirrorWebhookSecret waits for the Secret of our webhook in the SKR
// (ourWebhookSecret) and keeps its keys in files, as the kubelet keeps a
// mounted Secret.
func (s *System) mirrorWebhookSecret(ctx, runCtx context.Context) error {
	return s.mirrorSecret(ctx, runCtx, s.certDir, s.ourWebhookSecret,
		fmt.Sprintf("Secret %s/%s in the SKR (vs-controller log: %s)", SKRNamespace, bundle.SecretName, filepath.Join(s.Dir, "logs", "vs-controller.log")))
}

// IdentityKeyDir holds the identity signing Secret's keys: tls.key
// (ext-authz's --identity-signing-key-file) and tls.crt (the verifiers'
// --identity-key-file).
func (s *System) IdentityKeyDir() string { return filepath.Join(s.Dir, "identity-signing") }

// mirrorSecret waits for the Secret get returns (nil: not there yet) and
// keeps its keys ca.crt, tls.crt and tls.key in files in dir until runCtx
// ends; what names the Secret in the error.
func (s *System) mirrorSecret(ctx, runCtx context.Context, dir string, get func(context.Context) (*corev1.Secret, error), what string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	written := map[string][]byte{}
	sync := func(c context.Context) (bool, error) {
		sec, err := get(c)
		if err != nil || sec == nil {
			return false, err
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			v := sec.Data[k]
			if len(v) == 0 {
				return false, nil
			}
			if string(written[k]) == string(v) {
				continue
			}
			tmp := filepath.Join(dir, "."+k)
			if err := os.WriteFile(tmp, v, 0o600); err != nil {
				return false, err
			}
			if err := os.Rename(tmp, filepath.Join(dir, k)); err != nil {
				return false, err
			}
			written[k] = v
		}
		return true, nil
	}
	deadline, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := poll(deadline, 100*time.Millisecond, sync); err != nil {
		return fmt.Errorf("waiting for %s: %w", what, err)
	}
	s.goRun(func() error {
		_ = poll(runCtx, 250*time.Millisecond, func(c context.Context) (bool, error) {
			_, err := sync(c)
			return false, err
		})
		return nil
	})
	return nil
}

// poll calls f every interval until it reports done, fails, or ctx ends.
func poll(ctx context.Context, interval time.Duration, f func(context.Context) (bool, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		done, err := f(ctx)
		if err != nil || done {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Stop stops the processes (in reverse order), the stand-ins and the API
// servers.
func (s *System) Stop() error {
	var errs []error
	for i := len(s.procs) - 1; i >= 0; i-- {
		if err := s.procs[i].stop(); err != nil {
			errs = append(errs, err)
		}
	}
	s.cancel()
	s.wg.Wait()
	for _, e := range s.runtimeEnvs {
		if err := e.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	if s.Env != nil {
		if err := s.Env.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	s.ports.release()
	return errors.Join(errs...)
}
