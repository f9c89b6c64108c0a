package e2e_test

import (
	"context"
	"crypto/tls"
	"net/http"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Attacks on the seams of the edge (issue 40), through the real API
// servers, istiod and Envoy: a route that would rewrite the identity ext-authz
// asserts, and a gateway that falls back to the gateway CA for clients.
var _ = Describe("Adversaries at the edge", Label("adversary"), Ordered, func() {
	var n sample

	BeforeAll(func(ctx SpecContext) {
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	// post sends an event for the sample runtime to path with cert; the
	// error of the request (a refused TLS handshake) or its status.
	post := func(ctx context.Context, path string, cert *tls.Certificate) (int, error) {
		status, _, _, err := postEvent(ctx, env.HTTPClient(cert), path, probeEvent(n, "edge-adversary"))
		return status, err
	}

	// Finding 1 (HIGH): a tenant who may write VirtualServices in its own
	// namespace bound a route to istio-system/kcp-gateway that rewrote
	// /tenant/operator to the operator's event path and set
	// x-watcher-runtime-id after ext_authz: the operator saw the runtime the
	// route named, not the certificate's.
	It("refuses a tenant's route on the watcher Gateway that would speak for another runtime", func(ctx SpecContext) {
		imp, ok := env.(interface {
			KCPAs(user string) (client.Client, error)
		})
		if !ok {
			Fail("this spec acts as a tenant (impersonation); the environment cannot")
		}
		const ns, user = "tenant-routes", "system:serviceaccount:tenant-routes:routes"
		admin := env.KCP()
		Expect(admin.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(admin.Delete(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))).To(Succeed())
		})
		Expect(admin.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "routes", Namespace: ns},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"networking.istio.io"}, Resources: []string{"virtualservices"}, Verbs: []string{"*"}}}})).To(Succeed())
		Expect(admin.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "routes", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "routes"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}})).To(Succeed())
		tenant, err := imp.KCPAs(user)
		Expect(err).NotTo(HaveOccurred())

		attack := func(headers map[string]string) *istionetworkingv1.VirtualService {
			vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "operator"}}
			vs.Spec.Hosts = []string{"*"}
			vs.Spec.Gateways = []string{n.GatewayNS + "/kcp-gateway"}
			vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
				Match:   []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: "/tenant/operator"}}}},
				Rewrite: &istioapinetworking.HTTPRewrite{Uri: contract.EventPath(n.Manager)},
				Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
					Host: "example-operator." + n.KymaNamespace + ".svc.cluster.local", Port: &istioapinetworking.PortSelector{Number: 8082}}}},
			}}
			if headers != nil {
				vs.Spec.Http[0].Headers = &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Set: headers}}
			}
			return vs
		}
		// RBAC reaches the authorizer a moment after the binding: until
		// then the create is refused by RBAC, afterwards by the policy.
		var refusal error
		Eventually(func() string {
			refusal = tenant.Create(ctx, attack(map[string]string{contract.HeaderRuntimeID: "forged-runtime", contract.HeaderXFCC: "By=x;Hash=y;Subject=\"CN=forged-runtime\""}))
			if refusal == nil {
				return "created"
			}
			return refusal.Error()
		}).WithContext(ctx).WithTimeout(30*time.Second).WithPolling(100*time.Millisecond).
			Should(ContainSubstring("may not bind a VirtualService to the watcher Gateway"), "the attack route must be refused by the route policy")
		Expect(apierrors.IsForbidden(refusal)).To(BeTrue())
		// A route on the watcher Gateway at all — even one that touches no
		// header — is not the tenant's to make; and the identity headers
		// are refused on any Gateway (the API server names the first
		// validation that fails).
		Expect(tenant.Create(ctx, attack(nil)).Error()).To(ContainSubstring("may not bind a VirtualService to the watcher Gateway"))
		own := attack(map[string]string{contract.HeaderRuntimeID: "forged-runtime"})
		own.Spec.Gateways = []string{ns + "/own"}
		Expect(tenant.Create(ctx, own).Error()).To(ContainSubstring("may not set, add or remove the identity headers x-watcher-* or x-forwarded-client-cert"))

		// Through the gateway the tenant's path leads nowhere: the
		// runtime's own certificate passes ext-authz, and finds no route.
		_, sample := sampleRuntimeCert(ctx, n)
		code, err := post(ctx, "/tenant/operator", sample)
		Expect(err).NotTo(HaveOccurred())
		Expect(code).To(Equal(http.StatusNotFound))
	})

	// Finding 3: with the client CA Secret kcp-gateway-tls-cacert missing,
	// Istio serves the ca.crt of kcp-gateway-tls — the gateway CA — as the
	// client trust: a certificate the gateway CA signed with a runtime's
	// names passed Envoy and ext-authz; vs-controller did not re-write the
	// Secret while its memo said it had.
	It("never trusts the gateway CA for clients, also while the client CA Secret is deleted", func(ctx SpecContext) {
		gwCA, err := localenv.LoadCA(ctx, env.KCP(), client.ObjectKey{Namespace: n.GatewayNS, Name: localenv.GatewayCAName})
		Expect(err).NotTo(HaveOccurred())
		leaf, err := gwCA.Issue(pki.LeafOptions{CommonName: n.RuntimeID, DNSNames: []string{n.SKRDomain}})
		Expect(err).NotTo(HaveOccurred())
		forged, err := leaf.TLS()
		Expect(err).NotTo(HaveOccurred())
		_, real := sampleRuntimeCert(ctx, n)
		refused := func(ctx context.Context) bool {
			code, err := post(ctx, contract.EventPath(n.Manager), &forged)
			return err != nil || code == http.StatusForbidden || code == http.StatusUnauthorized
		}
		Expect(refused(ctx)).To(BeTrue(), "a gateway-CA certificate passed before anything was deleted")

		clientCA := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: n.GatewayNS, Name: localenv.GatewayTLSSecret + "-cacert"}}
		deleted := time.Now()
		Expect(env.KCP().Delete(ctx, clientCA)).To(Succeed())
		// Istio pushes the fallback within a second of the deletion; three
		// of vs-controller's trust passes (5 s each) cover the repair,
		// which is looked for at every poll.
		var back time.Duration
		Consistently(func(ctx context.Context) bool {
			if back == 0 && env.KCP().Get(ctx, client.ObjectKeyFromObject(clientCA), &corev1.Secret{}) == nil {
				back = time.Since(deleted)
			}
			return refused(ctx)
		}).WithContext(ctx).WithTimeout(15*time.Second).WithPolling(250*time.Millisecond).
			Should(BeTrue(), "a certificate of the gateway CA passed the gateway while the client CA Secret was missing")
		Expect(back).NotTo(BeZero(), "vs-controller did not write the client CA Secret again within three trust passes")
		AddReportEntry("client CA Secret back after", back.String())
		Eventually(func(ctx context.Context) (int, error) { return post(ctx, contract.EventPath(n.Manager), real) }).
			WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(http.StatusOK))
		Expect(refused(ctx)).To(BeTrue())
	})
})
