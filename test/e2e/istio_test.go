package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// The edge as real istiod configures it (issue 27): the gateway — upstream
// Envoy started by pilot-agent — takes its routes, TLS, XFCC and ext_authz
// from istiod's xDS for the manifests' Gateway, AuthorizationPolicy and
// mesh config. Pushes are awaited by what Envoy accepted (its config_dump,
// polled), never by time.
var _ = Describe("Istio edge", Ordered, Label("istio"), func() {
	var (
		n  sample
		is e2e.IstioControls
	)

	BeforeAll(func(ctx SpecContext) {
		ie, ok := env.(e2e.IstioEnvironment)
		if !ok {
			Fail("the istio specs need an environment whose gateway's Envoy admin API they can read (the local one)")
		}
		is = ie.Istio()
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	// versions are the xDS versions Envoy accepted, by type.
	versions := func(ctx context.Context) map[string]string {
		GinkgoHelper()
		dump, err := is.GatewayAdmin().ConfigDump(ctx, false)
		Expect(err).NotTo(HaveOccurred())
		v, err := envoy.Versions(dump)
		Expect(err).NotTo(HaveOccurred())
		return v
	}

	// routed waits, by the routes Envoy accepted (its config_dump, polled
	// every 20 ms), until path is routed; it returns when that was seen.
	routed := func(ctx context.Context, path string, within time.Duration) time.Time {
		GinkgoHelper()
		Eventually(func(ctx context.Context) (string, error) {
			dump, err := is.GatewayAdmin().ConfigDump(ctx, false)
			if err != nil {
				return "", err
			}
			return envoy.RouteCluster(dump, is.GatewayHost(), path)
		}).WithContext(ctx).WithTimeout(within).WithPolling(20*time.Millisecond).ShouldNot(BeEmpty(),
			"%s not routed by the gateway within %s (xDS versions %v)", path, within, versions(ctx))
		return time.Now()
	}

	post := func(ctx context.Context, path string, cert *tls.Certificate, xfcc string) (int, string, string) {
		GinkgoHelper()
		body, _ := json.Marshal(contract.WatchEvent{
			Watched:    contract.ObjectKey{Namespace: n.SKRNamespace, Name: "istio-probe"},
			WatchedGvk: contract.GroupVersionKind{Group: v1beta2.GroupVersion.Group, Version: "v1beta2", Kind: "Kyma"},
		})
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+path, bytes.NewReader(body))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		if xfcc != "" {
			req.Header.Set(contract.HeaderXFCC, xfcc)
		}
		resp, err := env.HTTPClient(cert).Do(req)
		Expect(err).NotTo(HaveOccurred())
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get(contract.HeaderDenyReason), string(b)
	}

	It("routes a new Watcher within 2 s of its creation, through an istiod push", func(ctx SpecContext) {
		w := managerWatcher(n, "istio-push", v1beta2.Service{Name: "example-operator", Namespace: n.KymaNamespace, Port: 8082})
		before := versions(ctx)
		created := time.Now()
		Expect(env.KCP().Create(ctx, w)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, w)).To(Succeed()) })
		live := routed(ctx, contract.EventPath("istio-push"), 2*time.Second)
		AddReportEntry("route live after", live.Sub(created).String())
		Expect(versions(ctx)["RDS"]).NotTo(Equal(before["RDS"]), "the route came without an RDS push")
	})

	It("fails the TLS handshake of a client without a certificate", func(ctx SpecContext) {
		Expect(handshakeRefusal(ctx, nil)).To(MatchError(ContainSubstring("certificate required")))
	})

	It("replaces a client-sent XFCC header with the verified certificate", func(ctx SpecContext) {
		// A certificate of no runtime, claiming the sample runtime in XFCC:
		// ext-authz judges the gateway's XFCC, so the claim is never seen.
		stranger, err := env.IssueClientCert(pki.LeafOptions{CommonName: "stranger", DNSNames: []string{"stranger.example.com"}})
		Expect(err).NotTo(HaveOccurred())
		status, reason, body := post(ctx, contract.EventPath(n.Manager), &stranger,
			fmt.Sprintf(`Hash=00;Subject="CN=%s";DNS=%s`, n.RuntimeID, n.SKRDomain))
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(reason).To(Equal(string(contract.ReasonUnknownRuntime)), body)
	})

	It("sends a path outside /v2/ that a foreign VirtualService binds to the gateway through ext-authz", func(ctx SpecContext) {
		vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "foreign", Namespace: n.KymaNamespace}}
		vs.Spec.Gateways = []string{n.GatewayNS + "/kcp-gateway"}
		vs.Spec.Hosts = []string{"*"} // the local Gateway's host (localenv.GatewayServerHost)
		vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
			Match: []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{
				MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: "/foreign"}}}},
			Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
				Host: "example-operator." + n.KymaNamespace + ".svc.cluster.local", Port: &istioapinetworking.PortSelector{Number: 8082}}}},
		}}
		Expect(env.KCP().Create(ctx, vs)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, vs)).To(Succeed()) })
		routed(ctx, "/foreign/x", 30*time.Second)

		stranger, err := env.IssueClientCert(pki.LeafOptions{CommonName: "stranger", DNSNames: []string{"stranger.example.com"}})
		Expect(err).NotTo(HaveOccurred())
		status, reason, body := post(ctx, "/foreign/x", &stranger, "")
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(reason).To(Equal(string(contract.ReasonUnknownRuntime)), "refused by ext-authz: %s", body)
	})

	// Also an edge spec (label edge): ext-authz down through real Envoy.
	It("answers 503 while ext-authz is down, the webhook retries, and events flow again once it is back", Label("edge"), func(ctx SpecContext) {
		probe := n.watchedKyma("istio-authz-down")
		Expect(env.SKR().Create(ctx, probe)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, probe.GetName(), time.Time{})) }).Should(BeNumerically(">=", 1))

		Expect(is.SetExtAuthzUp(ctx, false)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(is.SetExtAuthzUp(ctx, true)).To(Succeed()) })
		_, sample := sampleRuntimeCert(ctx, n)
		status, _, body := post(ctx, contract.EventPath(n.Manager), sample, "")
		Expect(status).To(Equal(http.StatusServiceUnavailable), "ext-authz down: the provider's statusOnError: %s", body)

		retriesBefore := webhookCounter(ctx, "runtime_watcher_skr_webhook_delivery_attempts_total", map[string]string{"result": "5xx"})
		since := time.Now()
		Expect(setSpec(ctx, probe, "while-ext-authz-is-down")).To(Succeed())
		Eventually(func(ctx context.Context) float64 {
			return webhookCounter(ctx, "runtime_watcher_skr_webhook_delivery_attempts_total", map[string]string{"result": "5xx"})
		}).WithContext(ctx).Should(BeNumerically(">=", retriesBefore+2), "the webhook did not retry the 503")
		Expect(received.For(n.SKRNamespace, probe.GetName(), since)).To(BeEmpty(), "an event passed without ext-authz")

		Expect(is.SetExtAuthzUp(ctx, true)).To(Succeed())
		Eventually(func() int { return len(received.For(n.SKRNamespace, probe.GetName(), since)) }).
			WithTimeout(time.Minute).Should(BeNumerically(">=", 1), "the change made while ext-authz was down never arrived")
	})
})
