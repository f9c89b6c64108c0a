package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/listener/example/eventline"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
)

// kindEnvironment is a system that test/kind/e2e.sh deployed on kind with
// real Istio and cert-manager. It is configured by environment variables
// (the script sets them; defaults match manifests/samples):
//
//	KCP_KUBECONFIG, SKR_KUBECONFIG  kubeconfig files of the two clusters
//	GATEWAY_ADDR                    host:port where this machine reaches the ingress gateway
//	GATEWAY_HOST                    the Gateway's host name (SNI and Host header)
//	CA_SECRET                       namespace/name of the Secret of the CA that signs runtime certificates
//	OPERATOR_NAMESPACE, OPERATOR_SELECTOR  where the example operator's pod logs are read
//	INGRESS_NAMESPACE, INGRESS_DEPLOYMENT  the Istio ingress gateway Deployment (scaled for outages)
//	EXT_AUTHZ_DEPLOYMENT, VS_CONTROLLER_DEPLOYMENT, OPERATOR_DEPLOYMENT (KCP),
//	WEBHOOK_DEPLOYMENT (SKR)        namespace/name of the components' Deployments
//	                                (ClusterEnvironment, the "kind-faults" specs)
type kindEnvironment struct {
	kcp, skr   client.Client
	kcpClients *kubernetes.Clientset
	skrClients *kubernetes.Clientset
	events     chan Event
	caRef      string
	cancel     context.CancelFunc
	gatewayAdr string
	gatewayHst string
	ingressNS  string
	ingressDep string
	workloads  map[Component]Workload
}

func getenv(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// ConnectKind connects to the system on kind described by the environment.
func ConnectKind(ctx context.Context, log logr.Logger) (Environment, error) {
	kcpCfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("KCP_KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("KCP_KUBECONFIG: %w", err)
	}
	skrCfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("SKR_KUBECONFIG"))
	if err != nil {
		return nil, fmt.Errorf("SKR_KUBECONFIG: %w", err)
	}
	// client-go's default of 5 requests a second (burst 10) throttled the
	// specs' writers (startWriter paces about 20 writes a second, the
	// kind-faults specs run two) to a few writes a second on kind, with
	// "client-side throttling" in the log; envtest's configs of the local
	// environment allow 1000.
	for _, c := range []*rest.Config{kcpCfg, skrCfg} {
		c.QPS, c.Burst = 200, 400
	}
	workloads := map[Component]Workload{}
	for _, w := range []struct {
		c        Component
		env, def string
		skr      bool
		lease    string
	}{
		{ComponentExtAuthz, "EXT_AUTHZ_DEPLOYMENT", "kcp-system/ext-authz", false, ""},
		{ComponentVSController, "VS_CONTROLLER_DEPLOYMENT", "kcp-system/vs-controller", false, "vs-controller.operator.kyma-project.io"},
		{ComponentOperator, "OPERATOR_DEPLOYMENT", getenv("OPERATOR_NAMESPACE", localenv.KymaNamespace) + "/example-operator", false, "example-operator.runtime-watcher.kyma-project.io"},
		{ComponentGateway, "", getenv("INGRESS_NAMESPACE", "istio-system") + "/" + getenv("INGRESS_DEPLOYMENT", "istio-ingressgateway"), false, ""},
		{ComponentWebhook, "WEBHOOK_DEPLOYMENT", getenv("SKR_NAMESPACE", localenv.SKRNamespace) + "/skr-webhook", true, ""},
	} {
		ref := w.def
		if w.env != "" {
			ref = getenv(w.env, w.def)
		}
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || ns == "" || name == "" {
			return nil, fmt.Errorf("%s=%q: want namespace/name", w.env, ref)
		}
		workloads[w.c] = Workload{InSKR: w.skr, Namespace: ns, Name: name, LeaderLease: w.lease}
	}
	e := &kindEnvironment{
		workloads:  workloads,
		events:     make(chan Event, 4096),
		gatewayAdr: getenv("GATEWAY_ADDR", "localhost:30443"),
		gatewayHst: getenv("GATEWAY_HOST", "watcher.kcp.local"),
		ingressNS:  getenv("INGRESS_NAMESPACE", "istio-system"),
		ingressDep: getenv("INGRESS_DEPLOYMENT", "istio-ingressgateway"),
	}
	if e.kcp, err = client.New(kcpCfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return nil, err
	}
	if e.skr, err = client.New(skrCfg, client.Options{Scheme: testenv.Scheme()}); err != nil {
		return nil, err
	}
	if e.skrClients, err = kubernetes.NewForConfig(skrCfg); err != nil {
		return nil, err
	}
	if e.kcpClients, err = kubernetes.NewForConfig(kcpCfg); err != nil {
		return nil, err
	}
	e.caRef = getenv("CA_SECRET", "kcp-system/runtime-watcher-ca")
	if _, err = e.loadCA(ctx, e.caRef); err != nil {
		return nil, err
	}
	lctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	go e.followOperator(lctx, log, getenv("OPERATOR_NAMESPACE", localenv.KymaNamespace), getenv("OPERATOR_SELECTOR", "app.kubernetes.io/name=example-operator"))
	return e, nil
}

func (e *kindEnvironment) loadCA(ctx context.Context, ref string) (*pki.CA, error) {
	ns, name, ok := strings.Cut(ref, "/")
	if !ok {
		return nil, fmt.Errorf("CA_SECRET %q: want namespace/name", ref)
	}
	return localenv.LoadCA(ctx, e.kcp, client.ObjectKey{Namespace: ns, Name: name})
}

// followOperator streams the logs of every example operator pod (their
// JSON event lines; with 2 replicas and leader election the events are on
// the leader's), following new pods as they appear and reconnecting when a
// stream ends: a reconnected stream resumes after the last line it read
// (the kubelet's timestamps), so no line is lost or read twice while the
// pod lives (the "kind-faults" specs delete and restart these pods).
func (e *kindEnvironment) followOperator(ctx context.Context, log logr.Logger, ns, selector string) {
	var mu sync.Mutex
	following := map[string]bool{}
	// after: per pod streamed before, the kubelet timestamp of the last
	// line read (or when its stream started, if it had none).
	after := map[string]time.Time{}
	start := time.Now()
	for ctx.Err() == nil {
		pods, err := e.kcpClients.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil || len(pods.Items) == 0 {
			log.Info("waiting for the example operator pods", "namespace", ns, "selector", selector, "error", err)
		}
		if err == nil {
			for _, p := range pods.Items {
				mu.Lock()
				busy := following[p.Name]
				following[p.Name] = true
				from, seen := after[p.Name]
				if !seen {
					from = start
				}
				mu.Unlock()
				if !busy {
					go func(name string, from time.Time) {
						last := e.followPod(ctx, ns, name, from)
						mu.Lock()
						delete(following, name)
						after[name] = last
						mu.Unlock()
					}(p.Name, from)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// followPod streams one pod's log from lines logged after from until the
// stream ends and returns the timestamp of the last line read (from when
// none).
func (e *kindEnvironment) followPod(ctx context.Context, ns, name string, from time.Time) time.Time {
	// SinceTime has a resolution of seconds: lines up to from are read
	// again and skipped.
	since := metav1.NewTime(from)
	stream, err := e.kcpClients.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Follow: true, SinceTime: &since, Timestamps: true}).Stream(ctx)
	if err != nil {
		return from
	}
	defer stream.Close()
	last := from
	sc := bufio.NewScanner(stream)
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		ts, line, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, ts)
		if err != nil || !at.After(from) {
			continue
		}
		last = at
		ev, ok := eventline.Parse([]byte(line))
		if !ok {
			continue
		}
		select {
		case e.events <- Event{Time: ev.Time, RuntimeID: ev.RuntimeID, Namespace: ev.Watched.Namespace, Name: ev.Watched.Name, Kind: ev.GVK.Kind, Resync: ev.Resync}:
		case <-ctx.Done():
			return last
		}
	}
	return last
}

func (e *kindEnvironment) Names() Names {
	return Names{
		KymaNamespace: getenv("KYMA_NAMESPACE", localenv.KymaNamespace), RuntimeID: getenv("RUNTIME_ID", localenv.RuntimeID),
		SKRDomain: getenv("SKR_DOMAIN", localenv.SKRDomain), Manager: getenv("MANAGER", localenv.Manager),
		WatcherName: getenv("WATCHER_NAME", localenv.WatcherName), SKRNamespace: getenv("SKR_NAMESPACE", localenv.SKRNamespace),
		// The manifests leave --ca-settle at its default: a kubelet
		// updates mounted Secrets here.
		WatchedLabel: localenv.WatchedLabel, GatewayNS: e.ingressNS, CASettle: trust.DefaultSettle,
	}
}

// The kind environment is a ClusterEnvironment.
var _ ClusterEnvironment = (*kindEnvironment)(nil)

func (e *kindEnvironment) KCPClientset() kubernetes.Interface { return e.kcpClients }
func (e *kindEnvironment) SKRClientset() kubernetes.Interface { return e.skrClients }
func (e *kindEnvironment) Workload(c Component) Workload      { return e.workloads[c] }

func (e *kindEnvironment) KCP() client.Client   { return e.kcp }
func (e *kindEnvironment) SKR() client.Client   { return e.skr }
func (e *kindEnvironment) Events() <-chan Event { return e.events }
func (e *kindEnvironment) GatewayURL() string   { return "https://" + e.gatewayHst }

// HTTPClient dials GATEWAY_ADDR for the gateway's host name.
func (e *kindEnvironment) HTTPClient(cert *tls.Certificate) *http.Client {
	// The gateway has its own CA (manifests/kcp/base/pki.yaml): trust what
	// signs its certificate now.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	roots, err := localenv.GatewayRoots(ctx, e.kcp)
	if err != nil {
		roots = x509.NewCertPool() // trust nothing: requests fail with the reason
	}
	c := &tls.Config{RootCAs: roots, ServerName: e.gatewayHst, MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.Certificates = []tls.Certificate{*cert}
	}
	var d net.Dialer
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: c,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return d.DialContext(ctx, network, e.gatewayAdr)
		},
	}}
}

func (e *kindEnvironment) IssueClientCert(o pki.LeafOptions) (tls.Certificate, error) {
	// The current runtime CA: it may have rotated since the start.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ca, err := e.loadCA(ctx, e.caRef)
	if err != nil {
		return tls.Certificate{}, err
	}
	leaf, err := ca.Issue(o)
	if err != nil {
		return tls.Certificate{}, err
	}
	return leaf.TLS()
}

// WebhookMetrics reads every skr-webhook pod's /metrics (port 2112, skr-webhook's --metrics-bind-address)
// through the SKR API server's pod proxy.
func (e *kindEnvironment) WebhookMetrics(ctx context.Context) (string, error) {
	ns := getenv("SKR_NAMESPACE", localenv.SKRNamespace)
	pods, err := e.skrClients.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=skr-webhook"})
	if err != nil {
		return "", err
	}
	var out strings.Builder
	for _, p := range pods.Items {
		b, err := e.skrClients.CoreV1().Pods(ns).ProxyGet("http", p.Name, "2112", "metrics", nil).DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("metrics of pod %s: %w", p.Name, err)
		}
		out.Write(b)
	}
	return out.String(), nil
}

// SetGatewayUp scales the ingress gateway to 0 or 1 replicas and waits.
func (e *kindEnvironment) SetGatewayUp(ctx context.Context, up bool) error {
	var replicas int32
	if up {
		replicas = 1
	}
	dep := &appsv1.Deployment{}
	key := client.ObjectKey{Namespace: e.ingressNS, Name: e.ingressDep}
	if err := e.kcp.Get(ctx, key, dep); err != nil {
		return err
	}
	dep.Spec.Replicas = &replicas
	if err := e.kcp.Update(ctx, dep); err != nil {
		return err
	}
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		if err := e.kcp.Get(ctx, key, dep); err != nil {
			return err
		}
		if dep.Status.ReadyReplicas == replicas && dep.Status.Replicas == replicas {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return errors.New("ingress gateway did not reach the wanted replicas in 3 minutes")
}

func (e *kindEnvironment) Stop() error {
	e.cancel()
	return nil
}
