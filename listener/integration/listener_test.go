package integration_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/onsi/gomega/gbytes"
	"github.com/onsi/gomega/gexec"
	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const eventBody = `{"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`

// reconciled is what the test controller saw: the request and the Kyma it
// read from the cache.
type reconciled struct {
	Request reconcile.Request
	UID     types.UID
	Found   bool
}

// startManager runs a real manager on the kcp cluster with a listener for
// managerName (SetupWithManager) and a controller fed by
// source.Channel(l.Events(), listener.EnqueueKyma(cache, kymaNamespace)),
// with the runtime-id index registered. setup may prepare the manager and
// returns extra listener options.
func startManager(managerName string, setup func(mgr manager.Manager) []listener.Option) (*listener.Listener, <-chan reconciled) {
	return startManagerWith(managerName, ctrl.Options{}, setup)
}

func startManagerWith(managerName string, base ctrl.Options, setup func(mgr manager.Manager) []listener.Option) (*listener.Listener, <-chan reconciled) {
	mgr, err := ctrl.NewManager(kcp.Config, ctrl.Options{
		LeaderElection:          base.LeaderElection,
		LeaderElectionID:        base.LeaderElectionID,
		LeaderElectionNamespace: base.LeaderElectionNamespace,
		Scheme:                  testenv.Scheme(),
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress:  "0",
		Cache:                   cache.Options{DefaultNamespaces: map[string]cache.Config{kymaNamespace: {}}},
		Controller:              config.Controller{SkipNameValidation: ptr.To(true)},
	})
	Expect(err).NotTo(HaveOccurred())
	Expect(identity.IndexRuntimeID(context.Background(), mgr.GetFieldIndexer())).To(Succeed())
	opts := []listener.Option{listener.WithRegisterer(prometheus.NewRegistry())}
	if setup != nil {
		opts = append(opts, setup(mgr)...)
	}
	l, err := listener.New("127.0.0.1:0", managerName, opts...)
	Expect(err).NotTo(HaveOccurred())
	Expect(l.SetupWithManager(mgr)).To(Succeed())

	got := make(chan reconciled, 100)
	err = ctrl.NewControllerManagedBy(mgr).Named(managerName).
		WatchesRawSource(source.Channel(l.Events(), listener.EnqueueKyma(mgr.GetCache(), kymaNamespace))).
		Complete(reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			k := identity.NewKyma()
			err := mgr.GetClient().Get(ctx, req.NamespacedName, k)
			if err != nil && !apierrors.IsNotFound(err) {
				return reconcile.Result{}, err
			}
			got <- reconciled{Request: req, UID: k.GetUID(), Found: err == nil}
			return reconcile.Result{}, nil
		}))
	Expect(err).NotTo(HaveOccurred())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()))
	})
	Eventually(l.ReadyCheck).WithArguments((*http.Request)(nil)).WithTimeout(30 * time.Second).Should(Succeed())
	Expect(l.Addr()).To(HavePrefix("127.0.0.1:"))
	return l, got
}

type answer struct {
	Status     int
	Reason     string
	RetryAfter string
}

// post sends an event to the listener and returns its status and deny reason.
func post(l *listener.Listener, kv ...string) answer {
	return postBody(l, eventBody, kv...)
}

func postBody(l *listener.Listener, body string, kv ...string) answer {
	req, err := http.NewRequest(http.MethodPost, "http://"+l.Addr()+l.Path(), strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	for i := 0; i+1 < len(kv); i += 2 {
		req.Header.Add(kv[i], kv[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	a := answer{Status: resp.StatusCode, Reason: resp.Header.Get(contract.HeaderDenyReason)}
	if resp.StatusCode == http.StatusServiceUnavailable {
		a.RetryAfter = resp.Header.Get("Retry-After")
	}
	return a
}

func request(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: kymaNamespace, Name: name}}
}

// envoyXFCC builds the XFCC element an Envoy gateway sets with SANITIZE_SET
// (Hash, URL-encoded PEM in quoted Cert, quoted RFC 2253 Subject, DNS SANs).
func envoyXFCC(leaf *pki.Leaf) string {
	sum := sha256.Sum256(leaf.Cert.Raw)
	cert := strings.ReplaceAll(url.QueryEscape(string(leaf.CertPEM)), "+", "%20")
	h := fmt.Sprintf(`Hash=%x;Cert="%s";Subject="%s"`, sum, cert, leaf.Cert.Subject.String())
	for _, d := range leaf.Cert.DNSNames {
		h += ";DNS=" + d
	}
	return h
}

var _ = Describe("a controller fed by the listener through source.Channel", func() {
	It("reconciles the Kyma named by the runtime ID of an authorized event, and nothing for a refused one", func(ctx SpecContext) {
		a := createKyma(ctx, "runtime-a", "a.skr.example.com", nil)
		createKyma(ctx, "runtime-b", "b.skr.example.com", nil)
		l, got := startManager("header-manager", nil)

		Expect(post(l, contract.HeaderRuntimeID, "runtime-a")).To(Equal(answer{Status: http.StatusOK}))
		Eventually(got).WithTimeout(30 * time.Second).Should(Receive(Equal(reconciled{Request: request("runtime-a"), UID: a.GetUID(), Found: true})))
		Consistently(got).WithTimeout(time.Second).ShouldNot(Receive())

		Expect(post(l)).To(Equal(answer{Status: http.StatusUnauthorized}))
		Consistently(got).WithTimeout(time.Second).ShouldNot(Receive())
	})

	It("pins SANs in process against the Kyma CRs in the manager's cache", func(ctx SpecContext) {
		ca, err := pki.NewCA("skr-ca")
		Expect(err).NotTo(HaveOccurred())
		issue := func(cn string, dns ...string) string {
			leaf, err := ca.Issue(pki.LeafOptions{CommonName: cn, DNSNames: dns})
			Expect(err).NotTo(HaveOccurred())
			return envoyXFCC(leaf)
		}
		p := createKyma(ctx, "runtime-p", "p.skr.example.com", nil)
		q := createKyma(ctx, "kyma-labelled", "q.skr.example.com", map[string]string{contract.LabelRuntimeID: "runtime-q"})
		r := createKyma(ctx, "runtime-r", "old.skr.example.com", nil)

		l, got := startManager("pinning-manager", func(mgr manager.Manager) []listener.Option {
			v := &identity.Verifier{Lookup: identity.NewKymaLookup(mgr.GetCache(), kymaNamespace), Roots: ca.Pool()}
			return []listener.Option{listener.WithSANPinning(v)}
		})

		By("accepting the certificate that carries the Kyma's skr-domain, whatever runtime-id header the client sends")
		Expect(post(l, contract.HeaderXFCC, issue("runtime-p", "p.skr.example.com"), contract.HeaderRuntimeID, "runtime-r")).
			To(Equal(answer{Status: http.StatusOK}))
		Eventually(got).WithTimeout(30 * time.Second).Should(Receive(Equal(reconciled{Request: request("runtime-p"), UID: p.GetUID(), Found: true})))

		By("refusing other certificates with the contract's reasons")
		Expect(post(l, contract.HeaderXFCC, issue("runtime-p", "evil.example.com"))).
			To(Equal(answer{Status: http.StatusForbidden, Reason: string(contract.ReasonSANMismatch)}))
		Expect(post(l, contract.HeaderXFCC, issue("runtime-x", "p.skr.example.com"))).
			To(Equal(answer{Status: http.StatusForbidden, Reason: string(contract.ReasonUnknownRuntime)}))
		Expect(post(l, contract.HeaderRuntimeID, "runtime-p")).
			To(Equal(answer{Status: http.StatusUnauthorized, Reason: string(contract.ReasonMissingClientCert)}))
		Consistently(got).WithTimeout(time.Second).ShouldNot(Receive())

		By("finding a runtime through the runtime-id label index")
		Expect(post(l, contract.HeaderXFCC, issue("runtime-q", "q.skr.example.com"))).To(Equal(answer{Status: http.StatusOK}))
		// EnqueueKyma finds the Kyma through the same lookup: by its label.
		Eventually(got).WithTimeout(30 * time.Second).Should(Receive(Equal(reconciled{Request: request("kyma-labelled"), UID: q.GetUID(), Found: true})))

		By("following a changed skr-domain annotation through the cache")
		newCert := issue("runtime-r", "new.skr.example.com")
		Expect(post(l, contract.HeaderXFCC, newCert)).
			To(Equal(answer{Status: http.StatusForbidden, Reason: string(contract.ReasonSANMismatch)}))
		r.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: "new.skr.example.com"})
		Expect(kcp.Client.Update(ctx, r)).To(Succeed())
		Eventually(func() answer { return post(l, contract.HeaderXFCC, newCert) }).WithTimeout(30 * time.Second).
			Should(Equal(answer{Status: http.StatusOK}))
		Eventually(got).WithTimeout(30 * time.Second).Should(Receive(Equal(reconciled{Request: request("runtime-r"), UID: r.GetUID(), Found: true})))
	})
})

var _ = Describe("the example operator", func() {
	It("reconciles the Kyma of each event and prints one line per event", func(ctx SpecContext) {
		createKyma(ctx, "runtime-e", "e.skr.example.com", nil)
		bin, err := testenv.BuildBinary("listener/example")
		Expect(err).NotTo(HaveOccurred())
		listenAddr, healthAddr := testenv.FreeAddr(), testenv.FreeAddr()
		cmd := exec.Command(bin, "--kubeconfig", kcp.KubeconfigPath, "--listen-addr", listenAddr,
			"--health-probe-bind-address", healthAddr, "--metrics-bind-address", "0", "--manager", "example-operator", "--kyma-namespace", kymaNamespace)
		session, err := gexec.Start(cmd, GinkgoWriter, GinkgoWriter)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { session.Terminate().Wait(30 * time.Second) })

		Eventually(session.Out).WithTimeout(30 * time.Second).Should(gbytes.Say(`listening for SKR events on ` + listenAddr + `/v2/example-operator/event`))
		Eventually(func() (int, error) {
			resp, err := http.Get("http://" + healthAddr + "/readyz")
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}).WithTimeout(30 * time.Second).Should(Equal(http.StatusOK))

		req, err := http.NewRequest(http.MethodPost, "http://"+listenAddr+contract.EventPath("example-operator"), strings.NewReader(eventBody))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set(contract.HeaderRuntimeID, "runtime-e")
		resp, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusOK))
		Eventually(session.Out).WithTimeout(30 * time.Second).Should(gbytes.Say(
			`\d\d:\d\d:\d\d\.\d{3}  runtime runtime-e: Kyma operator\.kyma-project\.io/v1beta2 kcp-system/kyma-sample changed -> Kyma kcp-system/runtime-e reconciled \(exists\)\n`))

		session.Terminate()
		Eventually(session).WithTimeout(30 * time.Second).Should(gexec.Exit(0))
	})
})

var _ = Describe("two replicas with leader election (SetupWithManager)", func() {
	It("are both ready; the non-leader answers 503 at once, the leader routes resyncs and records heartbeats", func(ctx SpecContext) {
		k := createKyma(ctx, "kyma-replicas", "rep.skr.example.com", map[string]string{contract.LabelRuntimeID: "runtime-rep"})
		le := ctrl.Options{LeaderElection: true, LeaderElectionID: "listener-it-replicas", LeaderElectionNamespace: kymaNamespace}
		leader, got := startManagerWith("replica-manager", le, nil)
		Eventually(leader.ConsumerRunning).WithTimeout(30 * time.Second).Should(BeTrue())
		other, otherGot := startManagerWith("replica-manager", le, nil) // ready: startManagerWith waited for it
		Expect(other.ConsumerRunning()).To(BeFalse())

		By("the non-leader sends the sender on with 503 and Retry-After, nothing on its channel")
		Expect(post(other, contract.HeaderRuntimeID, "runtime-rep")).To(Equal(answer{Status: http.StatusServiceUnavailable, RetryAfter: "1"}))
		Expect(postBody(other, `{"watched":{},"watchedGvk":{},"heartbeat":true}`, contract.HeaderRuntimeID, "runtime-rep")).
			To(Equal(answer{Status: http.StatusServiceUnavailable, RetryAfter: "1"}))
		_, seen := other.LastSeen("runtime-rep")
		Expect(seen).To(BeFalse())

		By("the leader turns a resync into a request for the runtime's Kyma, found by its label")
		Expect(postBody(leader, `{"watched":{},"watchedGvk":{},"resync":"startup"}`, contract.HeaderRuntimeID, "runtime-rep")).
			To(Equal(answer{Status: http.StatusOK}))
		Eventually(got).WithTimeout(30 * time.Second).Should(Receive(Equal(reconciled{Request: request("kyma-replicas"), UID: k.GetUID(), Found: true})))
		first, ok := leader.LastSeen("runtime-rep")
		Expect(ok).To(BeTrue())

		By("a heartbeat advances last-seen and reconciles nothing")
		Eventually(func() time.Time {
			Expect(postBody(leader, `{"watched":{},"watchedGvk":{},"heartbeat":true}`, contract.HeaderRuntimeID, "runtime-rep")).
				To(Equal(answer{Status: http.StatusOK}))
			t, _ := leader.LastSeen("runtime-rep")
			return t
		}).WithTimeout(10 * time.Second).Should(BeTemporally(">", first))
		Consistently(got).WithTimeout(time.Second).ShouldNot(Receive())
		Consistently(otherGot).WithTimeout(time.Second).ShouldNot(Receive())
	})
})
