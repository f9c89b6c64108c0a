package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/envoy"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// Issue 40, finding 1, through real Envoy: Envoy applies a route's request
// headers after ext_authz, so a VirtualService that any namespace binds to
// the watcher gateway could set x-watcher-runtime-id (or
// x-forwarded-client-cert) and rewrite a tenant path to an operator's event
// path or the health path — with another runtime's certificate it spoke as
// the sample runtime. Admission (a ValidatingAdmissionPolicy) keeps such
// routes off the gateway; these specs switch every policy on VirtualServices
// off and prove that ext-authz's identity signature alone refuses them
// (docs/security.md, "Routes cannot speak for a runtime").
var _ = Describe("A route that speaks for a runtime after ext-authz", Label("adversary", "identity"), Ordered, func() {
	const tenantNS = "tenant-adversary"
	var (
		n      sample
		is     e2e.IstioControls
		forger *tls.Certificate // a real runtime's certificate, not the sample runtime's
	)

	BeforeAll(func(ctx SpecContext) {
		ie, ok := env.(e2e.IstioEnvironment)
		if !ok {
			Fail("the identity adversary specs read the gateway's routes from Envoy's admin API (the local environment)")
		}
		is = ie.Istio()
		n = sample(env.Names())
		pathReady(ctx, n)
		admissionOfVirtualServicesOff(ctx)
		Expect(client.IgnoreAlreadyExists(env.KCP().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: tenantNS}}))).To(Succeed())

		By("a second runtime, runtime-forger, whose own certificate ext-authz allows")
		const id, domain = "runtime-forger", "runtime-forger.adversary.example.com"
		kyma := extauthz.Kyma(n.KymaNamespace, id, domain, map[string]string{contract.LabelRuntimeID: id})
		Expect(client.IgnoreAlreadyExists(env.KCP().Create(ctx, kyma))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, kyma))).To(Succeed()) })
		c, err := env.IssueClientCert(pki.LeafOptions{CommonName: id, DNSNames: []string{domain}})
		Expect(err).NotTo(HaveOccurred())
		forger = &c
		// Its own events reach the operator as its own, signed by
		// ext-authz and verified by the listener through real Envoy.
		Eventually(func(ctx context.Context) []string {
			since := time.Now()
			status, _, _ := postVia(ctx, forger, contract.EventPath(n.Manager), probeEvent(n, "forger-own"))
			if status != http.StatusOK {
				return nil
			}
			var ids []string
			for _, ev := range received.For(n.SKRNamespace, "forger-own", since) {
				ids = append(ids, ev.RuntimeID)
			}
			return ids
		}).WithContext(ctx).WithTimeout(time.Minute).Should(ContainElement(id))
	})

	// tenantRoute binds a VirtualService in the tenant namespace to the
	// watcher gateway: prefix from is rewritten to to and sent to
	// host:port with the request headers set; it returns once Envoy routes
	// from.
	tenantRoute := func(ctx context.Context, name, from, to, host string, port uint32, set map[string]string) {
		GinkgoHelper()
		vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenantNS}}
		vs.Spec.Gateways = []string{n.GatewayNS + "/kcp-gateway"}
		vs.Spec.Hosts = []string{"*"}
		vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
			Match: []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{
				MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: from}}}},
			Rewrite: &istioapinetworking.HTTPRewrite{Uri: to},
			Headers: &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Set: set}},
			Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
				Host: host, Port: &istioapinetworking.PortSelector{Number: port}}}},
		}}
		// Eventually: a policy binding removed a moment ago may still be
		// enforced by the API server.
		Eventually(func(ctx context.Context) error { return env.KCP().Create(ctx, vs) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, vs))).To(Succeed()) })
		Eventually(func(ctx context.Context) (string, error) {
			dump, err := is.GatewayAdmin().ConfigDump(ctx, false)
			if err != nil {
				return "", err
			}
			return envoy.RouteCluster(dump, is.GatewayHost(), from)
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(100*time.Millisecond).ShouldNot(BeEmpty(), "%s not routed by the gateway", from)
	}

	operatorHost := func() string { return "example-operator." + n.KymaNamespace + ".svc.cluster.local" }

	It("refuses a tenant route that rewrites to the operator's event path and sets x-watcher-runtime-id", func(ctx SpecContext) {
		tenantRoute(ctx, "tenant-operator", "/tenant/operator", contract.EventPath(n.Manager), operatorHost(), 8082,
			map[string]string{contract.HeaderRuntimeID: n.RuntimeID, contract.HeaderSKRDomain: n.SKRDomain})
		since := time.Now()
		status, reason, body := postVia(ctx, forger, "/tenant/operator", probeEvent(n, "forged-by-route"))
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(reason).To(Equal(string(contract.ReasonSignatureInvalid)), "refused by the operator's listener: %s", body)
		Consistently(func() []e2e.Event { return received.For(n.SKRNamespace, "forged-by-route", since) }, quietPeriod).
			Should(BeEmpty(), "the operator took an event a route said was %s's", n.RuntimeID)
	})

	It("refuses a tenant route that sets x-forwarded-client-cert to the sample runtime's, at a listener that pins SANs itself", func(ctx SpecContext) {
		pe, ok := env.(e2e.PinningOperatorEnvironment)
		Expect(ok).To(BeTrue(), "the environment cannot run a listener with SAN pinning")
		const manager = "pinning-operator"
		op, err := pe.StartPinningOperator(ctx, manager, manager)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) { Expect(op.Stop(ctx)).To(Succeed()) })
		var taken []e2e.Event
		takenAs := func(name string) func() []string {
			return func() []string {
				for {
					select {
					case ev := <-op.Events():
						taken = append(taken, ev)
						continue
					default:
					}
					break
				}
				var ids []string
				for _, ev := range taken {
					if ev.Name == name {
						ids = append(ids, ev.RuntimeID)
					}
				}
				return ids
			}
		}

		// The sample runtime's certificate is public: a route can put it
		// into XFCC as the gateway writes it.
		sampleLeaf, _ := sampleRuntimeCert(ctx, n)
		certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: sampleLeaf.Raw})
		path := contract.EventPath(manager)
		exact := &istioapinetworking.StringMatch{MatchType: &istioapinetworking.StringMatch_Exact{Exact: path}}
		dest := []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
			Host: manager + "." + n.KymaNamespace + ".svc.cluster.local", Port: &istioapinetworking.PortSelector{Number: 8082}}}}
		vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "tenant-pinning", Namespace: tenantNS}}
		vs.Spec.Gateways = []string{n.GatewayNS + "/kcp-gateway"}
		vs.Spec.Hosts = []string{"*"}
		vs.Spec.Http = []*istioapinetworking.HTTPRoute{
			{ // with x-tenant-attack: XFCC set to the sample runtime's
				Match: []*istioapinetworking.HTTPMatchRequest{{Uri: exact, Headers: map[string]*istioapinetworking.StringMatch{
					"x-tenant-attack": {MatchType: &istioapinetworking.StringMatch_Exact{Exact: "1"}}}}},
				// "%%": Envoy reads a route's header values as format
				// strings (a lone "%" makes it reject the gateway's whole
				// route configuration); "%%" is a literal "%".
				Headers: &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Set: map[string]string{
					contract.HeaderXFCC: strings.ReplaceAll(extauthz.GatewayXFCC(certPEM, n.RuntimeID, []string{n.SKRDomain}), "%", "%%")}}},
				Route: dest,
			},
			{Match: []*istioapinetworking.HTTPMatchRequest{{Uri: exact}}, Route: dest}, // as the gateway passes it
		}
		Eventually(func(ctx context.Context) error { return env.KCP().Create(ctx, vs) }).WithContext(ctx).WithTimeout(30 * time.Second).Should(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, vs))).To(Succeed()) })

		By("the route as the gateway passes it: the listener pins runtime-forger's certificate, the signature holds")
		Eventually(func(ctx context.Context) []string {
			status, _, _ := postVia(ctx, forger, path, probeEvent(n, "pinned-own"))
			if status != http.StatusOK {
				return nil
			}
			return takenAs("pinned-own")()
		}).WithContext(ctx).WithTimeout(time.Minute).Should(ContainElement("runtime-forger"), "pinning operator log: %s", op.Log())

		By("the route that sets XFCC: the listener would pin the sample runtime, ext-authz signed runtime-forger")
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+path, bytes.NewReader(mustJSON(probeEvent(n, "forged-xfcc"))))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("x-tenant-attack", "1")
		resp, err := env.HTTPClient(forger).Do(req)
		Expect(err).NotTo(HaveOccurred())
		answer, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		Expect(resp.StatusCode).To(Equal(http.StatusForbidden), string(answer))
		Expect(resp.Header.Get(contract.HeaderDenyReason)).To(Equal(string(contract.ReasonSignatureInvalid)), string(answer))
		Consistently(takenAs("forged-xfcc"), quietPeriod).Should(BeEmpty(), "the pinning operator took an event a route said was %s's", n.RuntimeID)
	})

	It("refuses a health report a tenant route rewrites to the health path for the sample runtime", func(ctx SpecContext) {
		h, ok := env.(e2e.HealthEnvironment)
		Expect(ok).To(BeTrue(), "vs-controller's metrics are read through the health controls")
		refused := func(ctx context.Context) float64 {
			m, err := h.Health().ControllerMetrics(ctx)
			Expect(err).NotTo(HaveOccurred())
			v, _ := promtext.Sum(m, "runtime_watcher_vs_controller_health_reports_total", map[string]string{"result": string(contract.ReasonSignatureInvalid)})
			return v
		}
		tenantRoute(ctx, "tenant-health", "/tenant/health", contract.HealthPath, "vs-controller-health."+n.KymaNamespace+".svc.cluster.local", 8090,
			map[string]string{contract.HeaderRuntimeID: n.RuntimeID, contract.HeaderSKRDomain: n.SKRDomain})
		before := refused(ctx)
		status, reason, body := postVia(ctx, forger, "/tenant/health", contract.HealthReport{})
		Expect(status).To(Equal(http.StatusForbidden), body)
		Expect(reason).To(Equal(string(contract.ReasonSignatureInvalid)), "refused by vs-controller's health port: %s", body)
		Expect(refused(ctx)).To(Equal(before+1), "vs-controller counts the refused report")
	})
})

// postVia posts body as JSON to the gateway's path with cert; it returns
// the status, the deny reason and the body of the answer.
func postVia(ctx context.Context, cert *tls.Certificate, path string, body any) (int, string, string) {
	GinkgoHelper()
	status, reason, answer, err := postEvent(ctx, env.HTTPClient(cert), path, body)
	Expect(err).NotTo(HaveOccurred())
	return status, reason, answer
}

func mustJSON(v any) []byte {
	GinkgoHelper()
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	return b
}

// admissionOfVirtualServicesOff removes, until the spec's container ends,
// the bindings of every ValidatingAdmissionPolicy that validates
// VirtualServices: the specs show what a route that slipped through
// admission can do.
func admissionOfVirtualServicesOff(ctx context.Context) {
	GinkgoHelper()
	var policies admissionregistrationv1.ValidatingAdmissionPolicyList
	Expect(env.KCP().List(ctx, &policies)).To(Succeed())
	var names []string
	for _, p := range policies.Items {
		if p.Spec.MatchConstraints == nil {
			continue
		}
		for _, r := range p.Spec.MatchConstraints.ResourceRules {
			if slices.Contains(r.Resources, "virtualservices") || slices.Contains(r.Resources, "*") {
				names = append(names, p.Name)
			}
		}
	}
	var bindings admissionregistrationv1.ValidatingAdmissionPolicyBindingList
	Expect(env.KCP().List(ctx, &bindings)).To(Succeed())
	for i := range bindings.Items {
		b := bindings.Items[i]
		if !slices.Contains(names, b.Spec.PolicyName) {
			continue
		}
		Expect(env.KCP().Delete(ctx, &b)).To(Succeed())
		By("admission of VirtualServices off: binding " + b.Name + " of policy " + b.Spec.PolicyName + " removed")
		DeferCleanup(func(ctx SpecContext) {
			restored := &admissionregistrationv1.ValidatingAdmissionPolicyBinding{
				ObjectMeta: metav1.ObjectMeta{Name: b.Name, Labels: b.Labels, Annotations: b.Annotations}, Spec: b.Spec}
			Expect(env.KCP().Create(ctx, restored)).To(Succeed())
		})
	}
}
