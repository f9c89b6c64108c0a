package manifests

import (
	"context"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Issue 40, finding 1: a VirtualService in any namespace bound to the
// watcher Gateway set x-watcher-runtime-id after ext_authz and spoke for
// another runtime. gateway-routes-policy.yaml refuses that at admission;
// these specs run it on a real API server with real RBAC.
var _ = Describe("the watcher Gateway route policy (gateway-routes-policy.yaml)", Ordered, func() {
	ctx := context.Background()
	const (
		tenant   = "system:serviceaccount:tenant:routes"   // may write VirtualServices in its namespace, nothing else
		platform = "system:serviceaccount:tenant:platform" // also holds runtime-watcher-gateway-route-writer
	)
	var asTenant, asPlatform client.Client

	as := func(user string) client.Client {
		GinkgoHelper()
		cfg := rest.CopyConfig(kcp.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
		c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme()})
		Expect(err).NotTo(HaveOccurred())
		return c
	}
	route := func(ns, name string, gateways ...string) *istionetworkingv1.VirtualService {
		vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
		vs.Spec.Hosts = []string{"*"}
		vs.Spec.Gateways = gateways
		vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
			Match:   []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: "/tenant/operator"}}}},
			Rewrite: &istioapinetworking.HTTPRewrite{Uri: contract.EventPath("example-operator")},
			Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
				Host: "example-operator.kcp-system.svc.cluster.local", Port: &istioapinetworking.PortSelector{Number: 8082}}}},
		}}
		return vs
	}
	setting := func(vs *istionetworkingv1.VirtualService, header string) *istionetworkingv1.VirtualService {
		vs.Spec.Http[0].Headers = &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Set: map[string]string{header: "runtime-1"}}}
		return vs
	}
	refused := func(err error, saying string) {
		GinkgoHelper()
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "want Forbidden, got %v", err)
		Expect(err.Error()).To(ContainSubstring(saying))
	}

	BeforeAll(func() {
		objs := mustBuild("manifests/kcp/base")
		ensureNamespaces(ctx, objs)
		for _, name := range []string{"tenant", "istio-system"} {
			err := kcp.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}})
			if !apierrors.IsAlreadyExists(err) {
				Expect(err).NotTo(HaveOccurred())
			}
		}
		for _, o := range append(find(objs, "ValidatingAdmissionPolicy", "watcher-gateway-routes.operator.kyma-project.io"),
			append(find(objs, "ValidatingAdmissionPolicyBinding", "watcher-gateway-routes.operator.kyma-project.io"),
				find(objs, "ClusterRole", "runtime-watcher-gateway-route-writer")...)...) {
			// Another spec may have created the base's objects already;
			// what this one creates it removes again, since others
			// dry-run-create them.
			created := o.DeepCopy()
			if err := kcp.Client.Create(ctx, created); !apierrors.IsAlreadyExists(err) {
				Expect(err).NotTo(HaveOccurred(), "%s %s", o.GetKind(), o.GetName())
				DeferCleanup(func() { Expect(kcp.Client.Delete(ctx, created)).To(Succeed()) })
			}
		}
		// Both may write VirtualServices in tenant and in istio-system;
		// only platform may bind the watcher Gateway.
		for _, ns := range []string{"tenant", "istio-system"} {
			Expect(kcp.Client.Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "routes", Namespace: ns},
				Rules: []rbacv1.PolicyRule{{APIGroups: []string{"networking.istio.io"}, Resources: []string{"virtualservices"}, Verbs: []string{"*"}}}})).To(Succeed())
			Expect(kcp.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "routes", Namespace: ns},
				RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "routes"},
				Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: tenant},
					{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: platform}}})).To(Succeed())
		}
		Expect(kcp.Client.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "platform-routes", Namespace: "istio-system"},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "runtime-watcher-gateway-route-writer"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: platform}}})).To(Succeed())
		asTenant, asPlatform = as(tenant), as(platform)
		// The API server takes up a new policy, and the authorizer new
		// RBAC, asynchronously: wait until both decide as this file says.
		Eventually(func() error {
			return asTenant.Create(ctx, route("tenant", "probe", "istio-system/kcp-gateway"), client.DryRunAll)
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Satisfy(apierrors.IsForbidden))
		Eventually(func() error {
			return asPlatform.Create(ctx, route("tenant", "probe", "istio-system/kcp-gateway"), client.DryRunAll)
		}).WithTimeout(30 * time.Second).WithPolling(50 * time.Millisecond).Should(Succeed())
	})

	DescribeTable("refuses a tenant's route that binds the watcher Gateway, in every spelling Istio resolves",
		func(ns string, gateways ...string) {
			refused(asTenant.Create(ctx, route(ns, "bind", gateways...), client.DryRunAll), "may not bind a VirtualService to the watcher Gateway istio-system/kcp-gateway")
		},
		Entry("namespace/name", "tenant", "istio-system/kcp-gateway"),
		Entry("among other gateways", "tenant", "mesh", "tenant/own", "istio-system/kcp-gateway"),
		Entry("legacy FQDN", "tenant", "kcp-gateway.istio-system.svc.cluster.local"),
		Entry("legacy name.namespace", "tenant", "kcp-gateway.istio-system"),
		Entry("short name in istio-system", "istio-system", "kcp-gateway"),
		Entry("./name in istio-system", "istio-system", "./kcp-gateway"),
	)

	It("refuses a tenant's route that binds the watcher Gateway in a match only", func() {
		vs := route("tenant", "match-bind", "mesh")
		vs.Spec.Http[0].Match[0].Gateways = []string{"istio-system/kcp-gateway"}
		refused(asTenant.Create(ctx, vs, client.DryRunAll), "may not bind a VirtualService to the watcher Gateway")
	})

	It("refuses the attack of issue 40 (identity header set by a tenant route) by binding, and by header on the tenant's own Gateway", func() {
		// The API server reports the first validation that fails.
		refused(asTenant.Create(ctx, setting(route("tenant", "attack", "istio-system/kcp-gateway"), contract.HeaderRuntimeID), client.DryRunAll),
			"may not bind a VirtualService to the watcher Gateway")
		refused(asTenant.Create(ctx, setting(route("tenant", "attack", "tenant/own"), contract.HeaderRuntimeID), client.DryRunAll),
			"may not set, add or remove the identity headers")
	})

	It("lets a tenant route on its own Gateway, and on the mesh, without identity headers", func() {
		Expect(asTenant.Create(ctx, route("tenant", "own", "tenant/own", "mesh", "kcp-gateway"), client.DryRunAll)).To(Succeed())
		Expect(asTenant.Create(ctx, route("tenant", "mesh"), client.DryRunAll)).To(Succeed())
	})

	It("lets a platform writer (runtime-watcher-gateway-route-writer) route on the watcher Gateway", func() {
		Expect(asPlatform.Create(ctx, route("tenant", "platform", "istio-system/kcp-gateway"), client.DryRunAll)).To(Succeed())
	})

	DescribeTable("refuses a route that touches an identity header, on any Gateway, whoever writes it (a platform writer, a cluster admin)",
		func(mutate func(*istionetworkingv1.VirtualService)) {
			for _, c := range []client.Client{asPlatform, kcp.Client} {
				vs := route("tenant", "headers", "tenant/own")
				mutate(vs)
				refused(c.Create(ctx, vs, client.DryRunAll), "may not set, add or remove the identity headers")
			}
		},
		Entry("set x-watcher-runtime-id", func(vs *istionetworkingv1.VirtualService) { setting(vs, contract.HeaderRuntimeID) }),
		Entry("set X-Watcher-SKR-Domain (any case)", func(vs *istionetworkingv1.VirtualService) { setting(vs, "X-Watcher-SKR-Domain") }),
		Entry("set x-forwarded-client-cert", func(vs *istionetworkingv1.VirtualService) { setting(vs, contract.HeaderXFCC) }),
		Entry("add x-watcher-anything", func(vs *istionetworkingv1.VirtualService) {
			vs.Spec.Http[0].Headers = &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Add: map[string]string{"x-watcher-anything": "1"}}}
		}),
		Entry("remove x-watcher-runtime-id", func(vs *istionetworkingv1.VirtualService) {
			vs.Spec.Http[0].Headers = &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Remove: []string{contract.HeaderRuntimeID}}}
		}),
		Entry("set at a destination", func(vs *istionetworkingv1.VirtualService) {
			vs.Spec.Http[0].Route[0].Headers = &istioapinetworking.Headers{Request: &istioapinetworking.Headers_HeaderOperations{Set: map[string]string{contract.HeaderXFCC: "x"}}}
		}),
	)

	It("refuses a platform writer's route on the watcher Gateway that delegates", func() {
		vs := route("tenant", "delegating", "istio-system/kcp-gateway")
		vs.Spec.Http[0].Route = nil
		vs.Spec.Http[0].Rewrite = nil
		vs.Spec.Http[0].Delegate = &istioapinetworking.Delegate{Name: "elsewhere", Namespace: "tenant"}
		refused(asPlatform.Create(ctx, vs, client.DryRunAll), "may not delegate")
	})

	It("accepts the manifests' own health route (written by whoever installs the manifests)", func() {
		hr := find(mustBuild("manifests/kcp/base"), "VirtualService", "runtime-watcher-health")
		Expect(hr).To(HaveLen(1))
		Expect(kcp.Client.Create(ctx, (*unstructured.Unstructured)(hr[0].DeepCopy()), client.DryRunAll)).To(Succeed())
	})
})
