// Package e2e holds the end-to-end suite: the user journeys of docs/architecture.md
// run against a whole system. The specs are written once against
// Environment; E2E_ENV selects the implementation: "local" (default, the
// real binaries and API servers of test/localenv) or "kind" (real Istio and
// cert-manager on kind, set up by test/kind/e2e.sh).
package e2e

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"net/http"
	"time"

	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Event is one event as the example operator reported receiving it.
type Event struct {
	Time      time.Time
	RuntimeID string
	Namespace string
	Name      string
	Kind      string
	// Resync is the reason of a resync event ("" for a change).
	Resync string
}

// Names are the sample objects the environment created.
type Names struct {
	KymaNamespace string // KCP namespace of Kyma CRs, Watchers, Certificates
	RuntimeID     string // the sample runtime (Kyma name in the KCP)
	SKRDomain     string // its skr-domain annotation
	Manager       string // the example operator's manager name
	WatcherName   string // the sample Watcher (in KymaNamespace)
	SKRNamespace  string // where the skr-webhook objects live in the SKR
	WatchedLabel  string // label key the sample Watcher selects (value: Manager)
	GatewayNS     string // namespace of the Istio Gateway
	// CASettle is vs-controller's --ca-settle: how long a new CA stays in
	// the trust anchors before certificates are re-issued by it.
	CASettle time.Duration
}

// Environment is a running Runtime Watcher system with one runtime.
type Environment interface {
	Names() Names
	KCP() client.Client
	SKR() client.Client
	// Events is every event the example operator received, in order.
	Events() <-chan Event
	// GatewayURL is the base URL SKRs post events to (https://host:port).
	GatewayURL() string
	// HTTPClient reaches GatewayURL, trusts the gateway and presents cert
	// (nil: none).
	HTTPClient(cert *tls.Certificate) *http.Client
	// IssueClientCert signs a certificate with the CA the gateway trusts,
	// for requests that must fail SAN pinning.
	IssueClientCert(o pki.LeafOptions) (tls.Certificate, error)
	// WebhookMetrics is the Prometheus text of every skr-webhook process
	// in the runtime, concatenated.
	WebhookMetrics(ctx context.Context) (string, error)
	// SetGatewayUp takes the KCP gateway down or brings it back.
	SetGatewayUp(ctx context.Context, up bool) error
	Stop() error
}

// DeliveryEnvironment is an Environment that can break the delivery path
// on purpose (docs/architecture.md §4.8); the local one can.
type DeliveryEnvironment interface {
	Delivery() DeliveryControls
}

// DeliveryControls break and observe the delivery path.
type DeliveryControls interface {
	// SetServiceFault makes the operators' Service answer f's status
	// instead of an operator (nil: normal operation). The gateway is Envoy
	// and is not bent: a fault sits behind it, after ext-authz allowed the
	// request, and reaches the webhook as Envoy relays it.
	SetServiceFault(f func(*http.Request) (status int, ok bool)) error
	// KillWebhook SIGKILLs the skr-webhook; StartWebhook starts it again
	// and waits until it is ready.
	KillWebhook() error
	StartWebhook(ctx context.Context) error
	// WebhookRSS is the skr-webhook's resident set size and its peak, in bytes.
	WebhookRSS() (current, peak int64, err error)
	// WebhookURL is the base URL of the skr-webhook's admission endpoint
	// and WebhookClient a client that trusts it.
	WebhookURL() string
	WebhookClient() *http.Client
	// Operators are the example operator replicas.
	Operators() []OperatorReplica
	// ServiceAnswers counts per replica the answers of the operators'
	// Service stand-in, by status code.
	ServiceAnswers() []map[int]int
}

// OperatorReplica is one example operator process.
type OperatorReplica struct {
	HealthURL  string // base URL of /healthz and /readyz
	MetricsURL string // its /metrics
}

// TakeoverEnvironment is an Environment that can stage its runtime as
// Lifecycle Manager left it and run a second webhook process
// (docs/migrating-from-lifecycle-manager.md); the local one can.
type TakeoverEnvironment interface {
	Takeover() TakeoverControls
}

// TakeoverControls are what the takeover spec needs beyond Environment.
type TakeoverControls interface {
	// RestartController restarts vs-controller with its usual flags and
	// extraFlags, and waits until it is ready.
	RestartController(ctx context.Context, extraFlags ...string) error
	// RestartControllerAfter is RestartController that runs whileStopped
	// while no vs-controller runs.
	RestartControllerAfter(ctx context.Context, whileStopped func(context.Context) error, extraFlags ...string) error
	// StartWebhook starts another skr-webhook process serving the SKR API
	// server and posting to the gateway, with the given key pair.
	StartWebhook(ctx context.Context, o WebhookOptions) (ExtraWebhook, error)
	// OurWebhookURL is the base URL of the admission endpoint of the
	// runtime's own skr-webhook.
	OurWebhookURL() string
	// OurWebhookLog is the log of the runtime's own skr-webhook, with a
	// line per review it answered (localenv.ReviewLogFlags).
	OurWebhookLog() string
}

// WebhookOptions configure TakeoverControls.StartWebhook.
type WebhookOptions struct {
	// Name of the process (its log).
	Name string
	// CertPEM, KeyPEM: serving certificate (for localhost) and client
	// certificate at the gateway.
	CertPEM, KeyPEM []byte
	// GatewayCAPEM verifies the gateway.
	GatewayCAPEM []byte
	// Managers it serves.
	Managers []string
}

// ExtraWebhook is a webhook process started by StartWebhook.
type ExtraWebhook interface {
	// URL is the base URL of its admission endpoint.
	URL() string
	// MetricsURL is its /metrics.
	MetricsURL() string
	// Log is its log, with a line per review it answered.
	Log() string
	Stop() error
}

// IstioEnvironment is an Environment whose gateway is Envoy configured by
// a real istiod and observable through Envoy's admin API (the local one:
// upstream Envoy started by pilot-agent, test/localenv).
type IstioEnvironment interface {
	Istio() IstioControls
}

// IstioControls observe the gateway (Envoy's admin API) and break what
// sits behind it.
type IstioControls interface {
	// GatewayHost is the host of the Gateway's server.
	GatewayHost() string
	// GatewayAdmin is Envoy's admin API (loopback): statistics such as
	// ext_authz ok/denied/error and ssl versions, config_dump, server_info.
	GatewayAdmin() envoy.Admin
	// SetExtAuthzUp stops ext-authz or starts it again (and waits until it
	// is ready).
	SetExtAuthzUp(ctx context.Context, up bool) error
	// ExtAuthzLog is the running ext-authz's log: its decision log has a
	// line per Check with the runtime and the path it was asked about.
	ExtAuthzLog() string
	// SetExtAuthzFrozen freezes ext-authz (SIGSTOP: its connections stay
	// open and it answers nothing, an authz server slower than any
	// timeout) or thaws it (SIGCONT).
	SetExtAuthzFrozen(frozen bool) error
}

// FairnessEnvironment is an Environment whose ext-authz limits the
// runtimes of one class low (docs/architecture.md, "Edge protection per
// identity"); the local one does.
type FairnessEnvironment interface {
	// LowLimitClass is the Kyma label and its value that put a runtime
	// into that class, and the class's limit.
	LowLimitClass() (label, value string, limit ratelimit.Limit)
}

// KymaListenerEnvironment is an Environment that can run an operator on
// Kyma's own listener (github.com/kyma-project/runtime-watcher/listener
// v1.4.3, test/tools/kymalistener) behind its edge; the local one can.
type KymaListenerEnvironment interface {
	// StartKymaOperator starts such an operator for manager's events as
	// the in-cluster Service service (namespace Names().KymaNamespace,
	// port KymaOperatorPort), for a Watcher's serviceInfo.
	StartKymaOperator(ctx context.Context, manager, service string) (KymaOperator, error)
	ManagersFileEnvironment
}

// PinningOperatorEnvironment is an Environment that can run a second
// example operator whose listener pins SANs itself (identity mode b, the
// x-forwarded-client-cert header) and verifies ext-authz's identity
// signature.
type PinningOperatorEnvironment interface {
	// StartPinningOperator starts it for manager's events as the
	// in-cluster Service service (namespace Names().KymaNamespace, port
	// 8082).
	StartPinningOperator(ctx context.Context, manager, service string) (PinningOperator, error)
}

// PinningOperator is a running operator of a PinningOperatorEnvironment.
type PinningOperator interface {
	// Events is every event it took, in order.
	Events() <-chan Event
	Log() string
	Stop(ctx context.Context) error
}

// ManagersFileEnvironment is an Environment whose skr-webhook's managers
// file a spec updates itself (the local one: the file is written once, for
// the sample Watcher; a cluster's kubelet keeps a mounted ConfigMap
// current). A spec that adds a Watcher syncs the file once its webhook is
// in the SKR and restores it after the Watcher and its webhook are gone:
// the skr-webhook then forgets the manager with what it still owes it.
type ManagersFileEnvironment interface {
	// SyncWebhookManagers makes the skr-webhook read the managers
	// ConfigMap vs-controller renders now (as the kubelet updates a mounted
	// ConfigMap) and returns its content; RestoreWebhookManagers undoes it.
	SyncWebhookManagers(ctx context.Context) (string, error)
	RestoreWebhookManagers() error
}

// KymaOperatorPort is the port of a KymaOperator's Service.
const KymaOperatorPort = 8082

// KymaOperator is a running operator on Kyma's listener.
type KymaOperator interface {
	// Events is every event it received on Kyma's channel, in order.
	Events() <-chan KymaEvent
	// Log is where Kyma's listener logs (for failure messages).
	Log() string
	Stop(ctx context.Context) error
}

// KymaEvent is one event as Kyma's listener handed it to the operator:
// the unstructured object's content, each value with its Go type.
type KymaEvent struct {
	Time    time.Time
	Content map[string]KymaEventItem
}

// KymaEventItem is one content value (as encoding/json writes it) and its
// Go type, e.g. "types.NamespacedName".
type KymaEventItem struct {
	Type  string
	Value json.RawMessage
}

// HealthEnvironment is an environment whose runtimes' watch paths can be
// broken one at a time (the local one): the spec labelled "silent".
type HealthEnvironment interface {
	Health() HealthControls
}

// HealthControls act on real objects and processes only: nothing in the
// product has a fault-injection hook.
type HealthControls interface {
	// AddRuntime starts a further runtime (its own SKR API server, Kyma,
	// certificate and skr-webhook process; webhookArgs are added to its
	// webhook's flags).
	AddRuntime(ctx context.Context, id, domain string, webhookArgs ...string) (HealthRuntime, error)
	// RestartController restarts vs-controller with extraFlags added.
	RestartController(ctx context.Context, extraFlags ...string) error
	// ControllerMetrics is vs-controller's /metrics text.
	ControllerMetrics(ctx context.Context) (string, error)
	// RestartWebhook restarts the sample runtime's skr-webhook with args
	// added to its usual flags (none: the usual start).
	RestartWebhook(ctx context.Context, args ...string) error
	// StopWebhook stops the sample runtime's skr-webhook (SIGKILL).
	StopWebhook() error
	// RuntimeCA is the CA that issues runtime certificates.
	RuntimeCA(ctx context.Context) (*pki.CA, error)
}

// HealthRuntime is a further runtime of a HealthEnvironment.
type HealthRuntime interface {
	ID() string
	SKR() client.Client
}

// ClusterEnvironment is an Environment whose components run as pods of
// Deployments on real clusters (the kind one, test/kind/e2e.sh): the specs
// labelled "kind-faults" delete and restart those pods. The local
// environment runs processes, not pods, and does not implement it; the
// local suite leaves every spec labelled "kind-only" out.
type ClusterEnvironment interface {
	// KCPClientset and SKRClientset reach the two clusters.
	KCPClientset() kubernetes.Interface
	SKRClientset() kubernetes.Interface
	// Workload is where component c runs.
	Workload(c Component) Workload
}

// Component is a part of the system that runs as a Deployment.
type Component string

// The components of a ClusterEnvironment.
const (
	ComponentExtAuthz     Component = "ext-authz"
	ComponentVSController Component = "vs-controller"
	ComponentOperator     Component = "example-operator"
	ComponentGateway      Component = "istio-ingressgateway"
	ComponentWebhook      Component = "skr-webhook"
)

// Workload is the Deployment of a component.
type Workload struct {
	// InSKR: the Deployment is in the SKR cluster (else in the KCP).
	InSKR     bool
	Namespace string
	Name      string
	// LeaderLease is the leader election Lease (in Namespace) whose holder
	// is the replica that does the work ("" when every replica does).
	LeaderLease string
}

func (w Workload) String() string {
	cluster := "KCP"
	if w.InSKR {
		cluster = "SKR"
	}
	return "Deployment " + w.Namespace + "/" + w.Name + " in the " + cluster
}
