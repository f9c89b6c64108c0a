package integration_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/encoding/protojson"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/identity/xfcc"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/volume"
)

func createKyma(ns, name, domain string, labels map[string]string) {
	GinkgoHelper()
	Expect(kcp.Client.Create(context.Background(), extauthz.Kyma(ns, name, domain, labels))).To(Succeed())
}

var _ = Describe("ext-authz against a real API server", Ordered, func() {
	var (
		p     *extauthz.Process
		authz authv3.AuthorizationClient
	)
	check := func(req *authv3.CheckRequest) decision {
		GinkgoHelper()
		resp, err := authz.Check(context.Background(), req)
		Expect(err).NotTo(HaveOccurred())
		d := decisionOf(resp)
		if den := resp.GetDeniedResponse(); den != nil {
			var body contract.DenyBody
			Expect(json.Unmarshal([]byte(den.GetBody()), &body)).To(Succeed(), "deny body %q", den.GetBody())
			Expect(body.Reason).To(Equal(d.Reason))
			Expect(body.Message).NotTo(BeEmpty())
		}
		return d
	}
	checkXFCC := func(header string) decision {
		GinkgoHelper()
		return check(extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: header}))
	}

	BeforeAll(func() {
		createKyma(kymaNamespace, "runtime-1", "skr1.example.com", nil)
		createKyma(kymaNamespace, "runtime-nodomain", "", nil)
		p = startExtAuthz("--kyma-namespace=" + kymaNamespace)
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		authz = authv3.NewAuthorizationClient(conn)
	})

	It("is healthy, ready and SERVING over gRPC health once synced", func() {
		Expect(p.Healthy()).To(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		for _, svc := range []string{"", "envoy.service.auth.v3.Authorization"} {
			resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: svc})
			Expect(err).NotTo(HaveOccurred())
			Expect(resp.GetStatus()).To(Equal(healthpb.HealthCheckResponse_SERVING), "service %q", svc)
		}
	})

	It("allows a good certificate and overwrites identity headers the client sent", func() {
		good := issue("runtime-1", "skr1.example.com", "skr-webhook.kyma-system.svc")
		req := extauthz.CheckRequest("lifecycle-manager", map[string]string{
			contract.HeaderXFCC:       xfccOf(good),
			contract.HeaderRuntimeID:  "runtime-evil",
			contract.HeaderSKRDomain:  "evil.example.com",
			contract.HeaderDenyReason: "forged",
		})
		resp, err := authz.Check(context.Background(), req)
		Expect(err).NotTo(HaveOccurred())
		Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-1", "skr1.example.com")))
		for _, h := range resp.GetOkResponse().GetHeaders() {
			Expect(h.GetAppendAction().String()).To(Equal("OVERWRITE_IF_EXISTS_OR_ADD"))
		}
		Expect(resp.GetOkResponse().GetHeadersToRemove()).To(ContainElement(contract.HeaderDenyReason))
	})

	It("decodes Envoy's CheckRequest JSON (OPA fixtures) and takes identity only from XFCC", func() {
		good := issue("runtime-1", "skr1.example.com")
		for _, f := range []string{"example_allowed_request.json", "raw_body.json", "spiffe_principal.json"} {
			raw, err := os.ReadFile(filepath.Join("testdata", f))
			Expect(err).NotTo(HaveOccurred())
			req := &authv3.CheckRequest{}
			Expect(protojson.Unmarshal(raw, req)).To(Succeed())
			Expect(check(req)).To(Equal(deniedFor(contract.ReasonMissingClientCert)), f)

			req.Attributes.Request.Http.Headers[contract.HeaderXFCC] = xfccOf(good)
			Expect(check(req)).To(Equal(allowedAs("runtime-1", "skr1.example.com")), f)
		}
	})

	DescribeTable("denies with the contract reason",
		func(build func() *authv3.CheckRequest, want contract.DenyReason) {
			Expect(check(build())).To(Equal(deniedFor(want)))
		},
		Entry("no XFCC header", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", nil)
		}, contract.ReasonMissingClientCert),
		Entry("forged second element", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-1", "skr1.example.com")) + "," + xfccOf(issue("runtime-1", "evil.example.com"))})
		}, contract.ReasonMalformedXFCC),
		Entry("header over 32 KiB", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-1", "skr1.example.com")) + ";Hash=" + strings.Repeat("a", contract.MaxXFCCBytes)})
		}, contract.ReasonMalformedXFCC),
		Entry("no Cert, DNS pair only", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: `Hash=1;Subject="CN=runtime-1";URI=;DNS=skr1.example.com`})
		}, contract.ReasonMalformedXFCC),
		Entry("unparsable certificate", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: `Cert="-----BEGIN%20CERTIFICATE-----%0AAAAA%0A-----END%20CERTIFICATE-----"`})
		}, contract.ReasonInvalidCertificate),
		Entry("expired certificate", func() *authv3.CheckRequest {
			l, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr1.example.com"}, NotBefore: time.Now().Add(-72 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
			Expect(err).NotTo(HaveOccurred())
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(l)})
		}, contract.ReasonInvalidCertificate),
		Entry("certificate without CN", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("", "skr1.example.com"))})
		}, contract.ReasonInvalidCertificate),
		Entry("150 SANs", func() *authv3.CheckRequest {
			dns := []string{"skr1.example.com"}
			for i := range 149 {
				dns = append(dns, fmt.Sprintf("san-%d.example.com", i))
			}
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-1", dns...))})
		}, contract.ReasonTooManySANs),
		Entry("source certificate differs from XFCC", func() *authv3.CheckRequest {
			req := extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-1", "skr1.example.com"))})
			req.Attributes.Source.Certificate = xfcc.EncodeCert(issue("runtime-1", "skr1.example.com").CertPEM)
			return req
		}, contract.ReasonCertificateMismatch),
		Entry("unknown runtime", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-unknown", "skr1.example.com"))})
		}, contract.ReasonUnknownRuntime),
		Entry("Kyma without skr-domain", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-nodomain", "skr1.example.com"))})
		}, contract.ReasonDomainNotSet),
		Entry("SAN mismatch, DNS pair forged in the header", func() *authv3.CheckRequest {
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-1", "skr2.example.com")) + ";DNS=skr1.example.com"})
		}, contract.ReasonSANMismatch),
		Entry("URI SAN smuggling ;DNS=", func() *authv3.CheckRequest {
			l, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr2.example.com"}, URIs: []string{"spiffe://x/y;DNS=skr1.example.com"}})
			Expect(err).NotTo(HaveOccurred())
			h := `Hash=1;Cert="` + xfcc.EncodeCert(l.CertPEM) + `";Subject="CN=runtime-1";URI=spiffe://x/y;DNS=skr1.example.com;DNS=skr2.example.com`
			return extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: h})
		}, contract.ReasonSANMismatch),
	)

	It("follows Kyma CRs: create, re-annotate, delete (within a second)", func() {
		leaf := issue("runtime-follow", "skr-follow.example.com")
		h := xfccOf(leaf)
		decide := func() decision { return checkXFCC(h) }
		Expect(decide()).To(Equal(deniedFor(contract.ReasonUnknownRuntime)))

		createKyma(kymaNamespace, "runtime-follow", "", nil)
		Eventually(decide).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(deniedFor(contract.ReasonDomainNotSet)))

		annotate := func(domain string) {
			k := &unstructured.Unstructured{}
			k.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
			Expect(kcp.Client.Get(context.Background(), client.ObjectKey{Namespace: kymaNamespace, Name: "runtime-follow"}, k)).To(Succeed())
			k.SetAnnotations(map[string]string{contract.AnnotationSKRDomain: domain})
			Expect(kcp.Client.Update(context.Background(), k)).To(Succeed())
		}
		annotate("SKR-Follow.example.com.")
		Eventually(decide).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(allowedAs("runtime-follow", "skr-follow.example.com")))

		annotate("moved.example.com")
		Eventually(decide).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(deniedFor(contract.ReasonSANMismatch)))

		annotate("skr-follow.example.com")
		Eventually(decide).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(allowedAs("runtime-follow", "skr-follow.example.com")))

		Expect(kcp.Client.Delete(context.Background(), extauthz.Kyma(kymaNamespace, "runtime-follow", "", nil))).To(Succeed())
		Eventually(decide).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).Should(Equal(deniedFor(contract.ReasonUnknownRuntime)))
	})

	It("finds a runtime by its runtime-id label, only in --kyma-namespace", func() {
		byLabel := xfccOf(issue("runtime-label", "skr-label.example.com"))
		createKyma(kymaNamespace, "kyma-7f3a", "skr-label.example.com", map[string]string{contract.LabelRuntimeID: "runtime-label"})
		Eventually(func() decision { return checkXFCC(byLabel) }).WithTimeout(time.Second).WithPolling(10 * time.Millisecond).
			Should(Equal(allowedAs("runtime-label", "skr-label.example.com")))

		elsewhere := xfccOf(issue("runtime-elsewhere", "skr-elsewhere.example.com"))
		createKyma(otherNamespace, "runtime-elsewhere", "skr-elsewhere.example.com", nil)
		createKyma(otherNamespace, "kyma-elsewhere", "skr-elsewhere.example.com", map[string]string{contract.LabelRuntimeID: "runtime-elsewhere"})
		Consistently(func() decision { return checkXFCC(elsewhere) }).WithTimeout(time.Second).Should(Equal(deniedFor(contract.ReasonUnknownRuntime)))
	})

	It("counts decisions in /metrics", func() {
		text, err := p.Metrics()
		Expect(err).NotTo(HaveOccurred())
		Expect(text).To(MatchRegexp(`runtime_watcher_ext_authz_decisions_total\{mode="enforce",reason="",result="allow"\} [1-9]`))
		Expect(text).To(MatchRegexp(`runtime_watcher_ext_authz_decisions_total\{mode="enforce",reason="san-mismatch",result="deny"\} [1-9]`))
		Expect(text).To(MatchRegexp(`runtime_watcher_ext_authz_check_duration_seconds_count [1-9]`))
	})
})

var _ = Describe("ext-authz readiness", func() {
	It("answers 503 (never allows) until the Kyma cache can sync", func() {
		ctx := context.Background()
		// A user that can reach the API server but not list Kyma CRs.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: kymaNamespace, Name: "ext-authz-late"}}
		Expect(kcp.Client.Create(ctx, sa)).To(Succeed())
		cs, err := kubernetes.NewForConfig(kcp.Config)
		Expect(err).NotTo(HaveOccurred())
		tok, err := cs.CoreV1().ServiceAccounts(kymaNamespace).CreateToken(ctx, sa.Name, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
		}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		kc := clientcmdapi.NewConfig()
		kc.Clusters["kcp"] = &clientcmdapi.Cluster{Server: kcp.Config.Host, CertificateAuthorityData: kcp.Config.CAData}
		kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: tok.Status.Token}
		kc.Contexts["kcp"] = &clientcmdapi.Context{Cluster: "kcp", AuthInfo: "sa"}
		kc.CurrentContext = "kcp"
		kubeconfig := filepath.Join(GinkgoT().TempDir(), "sa.kubeconfig")
		Expect(clientcmd.WriteToFile(*kc, kubeconfig)).To(Succeed())

		createKyma(kymaNamespace, "runtime-late", "skr-late.example.com", nil)
		good := xfccOf(issue("runtime-late", "skr-late.example.com"))

		p := startExtAuthz("--kubeconfig="+kubeconfig, "--kyma-namespace="+kymaNamespace)
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		authz := authv3.NewAuthorizationClient(conn)
		check := func() decision {
			resp, err := authz.Check(ctx, extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: good}))
			Expect(err).NotTo(HaveOccurred())
			return decisionOf(resp)
		}
		health := func() healthpb.HealthCheckResponse_ServingStatus {
			resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
			Expect(err).NotTo(HaveOccurred())
			return resp.GetStatus()
		}
		Consistently(func(g Gomega) {
			g.Expect(p.Ready()).To(BeFalse())
			g.Expect(p.Healthy()).To(BeTrue())
			g.Expect(health()).To(Equal(healthpb.HealthCheckResponse_NOT_SERVING))
			g.Expect(check()).To(Equal(notReady()))
		}).WithTimeout(2 * time.Second).WithPolling(100 * time.Millisecond).Should(Succeed())

		// Grant read access: the informer syncs, and the service becomes ready.
		Expect(kcp.Client.Create(ctx, &rbacv1.Role{
			ObjectMeta: metav1.ObjectMeta{Namespace: kymaNamespace, Name: "kyma-reader"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{v1beta2.GroupVersion.Group}, Resources: []string{"kymas"}, Verbs: []string{"get", "list", "watch"}}},
		})).To(Succeed())
		Expect(kcp.Client.Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: kymaNamespace, Name: "ext-authz-late"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kyma-reader"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: kymaNamespace, Name: sa.Name}},
		})).To(Succeed())
		Eventually(p.Ready).WithTimeout(90 * time.Second).WithPolling(100 * time.Millisecond).Should(BeTrue())
		Expect(health()).To(Equal(healthpb.HealthCheckResponse_SERVING))
		Expect(check()).To(Equal(allowedAs("runtime-late", "skr-late.example.com")))
	})
})

var _ = Describe("ext-authz --ca-file", func() {
	It("denies certificates from another CA as invalid-certificate", func() {
		createKyma(kymaNamespace, "runtime-ca", "skr-ca.example.com", nil)
		caFile := writeFile("ca.crt", ca.PEM)
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--ca-file="+caFile)
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		authz := authv3.NewAuthorizationClient(conn)

		otherCA, err := pki.NewCA("rogue-ca")
		Expect(err).NotTo(HaveOccurred())
		rogue, err := otherCA.Issue(pki.LeafOptions{CommonName: "runtime-ca", DNSNames: []string{"skr-ca.example.com"}})
		Expect(err).NotTo(HaveOccurred())
		// Signed by the trusted CA, for the right domain, but with a second
		// CN (the same name twice: without the CN count it would be allowed).
		twoCNs, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-ca", ExtraCommonNames: []string{"runtime-ca"}, DNSNames: []string{"skr-ca.example.com"}})
		Expect(err).NotTo(HaveOccurred())
		for _, tc := range []struct {
			leaf *pki.Leaf
			want decision
		}{
			{issue("runtime-ca", "skr-ca.example.com"), allowedAs("runtime-ca", "skr-ca.example.com")},
			{rogue, deniedFor(contract.ReasonInvalidCertificate)},
			{twoCNs, deniedFor(contract.ReasonInvalidCertificate)},
		} {
			Eventually(func() decision {
				resp, err := authz.Check(context.Background(), extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: xfccOf(tc.leaf)}))
				Expect(err).NotTo(HaveOccurred())
				return decisionOf(resp)
			}).WithTimeout(time.Second).Should(Equal(tc.want))
		}
	})
})

var _ = Describe("ext-authz readiness with --ca-file", func() {
	It("turns unready over HTTP and gRPC health once every CA of the bundle expired", func() {
		// A CA that expires 30 s from now, after ext-authz is ready: its
		// start-up check accepts it, readiness drops when it expires.
		shortCA, err := pki.NewCAValid("short-ca", time.Now().Add(-time.Hour), time.Now().Add(30*time.Second))
		Expect(err).NotTo(HaveOccurred())
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--ca-file="+writeFile("ca.crt", shortCA.PEM))
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		health := func() healthpb.HealthCheckResponse_ServingStatus {
			resp, err := healthpb.NewHealthClient(conn).Check(context.Background(), &healthpb.HealthCheckRequest{Service: "envoy.service.auth.v3.Authorization"})
			Expect(err).NotTo(HaveOccurred())
			return resp.GetStatus()
		}
		Expect(health()).To(Equal(healthpb.HealthCheckResponse_SERVING))
		Eventually(p.Ready).WithTimeout(60 * time.Second).WithPolling(100 * time.Millisecond).Should(BeFalse())
		Expect(time.Now()).To(BeTemporally(">", shortCA.Cert.NotAfter), "unready before the CA expired")
		Expect(p.Healthy()).To(BeTrue(), "still alive")
		Eventually(health).WithTimeout(5 * time.Second).Should(Equal(healthpb.HealthCheckResponse_NOT_SERVING))
	})
})

var _ = Describe("ext-authz --ca-file reload", func() {
	It("follows a mounted CA bundle: A, A+B, B, then garbage keeps B", func() {
		createKyma(kymaNamespace, "runtime-reload", "skr-reload.example.com", nil)
		caA, err := pki.NewCA("reload-ca-a")
		Expect(err).NotTo(HaveOccurred())
		caB, err := pki.NewCA("reload-ca-b")
		Expect(err).NotTo(HaveOccurred())
		leafOf := func(ca *pki.CA) string {
			l, err := ca.Issue(pki.LeafOptions{CommonName: "runtime-reload", DNSNames: []string{"skr-reload.example.com"}})
			Expect(err).NotTo(HaveOccurred())
			return xfccOf(l)
		}
		fromA, fromB := leafOf(caA), leafOf(caB)

		// The file as kubelet keeps a mounted Secret: ca.crt -> ..data/ca.crt,
		// ..data swapped atomically. The poll interval is an hour: only the
		// directory's file events can trigger these reloads.
		vol, err := volume.New(filepath.Join(GinkgoT().TempDir(), "ca"))
		Expect(err).NotTo(HaveOccurred())
		write := func(data []byte) { GinkgoHelper(); Expect(vol.Write(map[string][]byte{"ca.crt": data})).To(Succeed()) }
		write(caA.PEM)
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--ca-file="+vol.File("ca.crt"), "--ca-reload-interval=1h")
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		defer conn.Close()
		authz := authv3.NewAuthorizationClient(conn)
		// Readiness is polled all along: a reload must never touch it.
		var readyPolls, notReady atomic.Int64
		pollCtx, stopPolling := context.WithCancel(context.Background())
		polled := make(chan struct{})
		go func() {
			defer close(polled)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				if ok, err := p.Ready(); !ok || err != nil {
					notReady.Add(1)
				}
				readyPolls.Add(1)
				select {
				case <-pollCtx.Done():
					return
				case <-tick.C:
				}
			}
		}()
		decide := func(header string) func() decision {
			return func() decision {
				resp, err := authz.Check(context.Background(), extauthz.CheckRequest("m", map[string]string{contract.HeaderXFCC: header}))
				Expect(err).NotTo(HaveOccurred())
				return decisionOf(resp)
			}
		}
		metric := func(series string) func() string {
			return func() string {
				text, err := p.Metrics()
				Expect(err).NotTo(HaveOccurred())
				for _, line := range strings.Split(text, "\n") {
					if strings.HasPrefix(line, series+" ") {
						return strings.TrimPrefix(line, series+" ")
					}
				}
				return "absent"
			}
		}
		allowed, invalid := allowedAs("runtime-reload", "skr-reload.example.com"), deniedFor(contract.ReasonInvalidCertificate)
		reloadsOK, reloadsErr := `runtime_watcher_ext_authz_ca_reloads_total{result="ok"}`, `runtime_watcher_ext_authz_ca_reloads_total{result="error"}`

		By("CA A: a certificate of A is allowed, one of B refused")
		Expect(decide(fromA)()).To(Equal(allowed))
		Expect(decide(fromB)()).To(Equal(invalid))
		Expect(metric("runtime_watcher_ext_authz_ca_bundle_certificates")()).To(Equal("1"))
		Expect(metric(reloadsOK)()).To(Equal("0"))

		By("A+B: B is allowed, A still")
		write(append(append([]byte{}, caA.PEM...), caB.PEM...))
		Eventually(decide(fromB)).WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(allowed))
		Expect(decide(fromA)()).To(Equal(allowed))
		Expect(metric("runtime_watcher_ext_authz_ca_bundle_certificates")()).To(Equal("2"))

		By("B only: A, verified and cached before, is refused from now on")
		write(caB.PEM)
		Eventually(decide(fromA)).WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal(invalid))
		Expect(decide(fromB)()).To(Equal(allowed))
		Expect(metric(reloadsOK)()).To(Equal("2"))
		Expect(strconv.ParseFloat(metric("runtime_watcher_ext_authz_ca_bundle_not_after_seconds")(), 64)).To(Equal(float64(caB.Cert.NotAfter.Unix())))

		By("garbage: B stays in use, the error is counted and logged")
		write([]byte("-----BEGIN CERTIFICATE-----\ngarbage\n-----END CERTIFICATE-----\n"))
		Eventually(metric(reloadsErr)).WithTimeout(5 * time.Second).WithPolling(20 * time.Millisecond).Should(Equal("1"))
		Expect(metric("runtime_watcher_ext_authz_ca_file_valid")()).To(Equal("0"))
		Expect(p.Output()).To(ContainSubstring("CA file changed but is unusable; keeping what is in use"))
		Consistently(func() []decision { return []decision{decide(fromA)(), decide(fromB)()} }).WithTimeout(time.Second).
			Should(Equal([]decision{invalid, allowed}))
		Expect(metric(reloadsOK)()).To(Equal("2"))
		Expect(metric(reloadsErr)()).To(Equal("1"))
		stopPolling()
		<-polled
		Expect(readyPolls.Load()).To(BeNumerically(">", 10))
		Expect(notReady.Load()).To(BeZero(), "readiness answered not ready during reloads")
	})
})

var _ = Describe("ext-authz start-up", func() {
	run := func(args ...string) (string, int) {
		GinkgoHelper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, binary, args...).CombinedOutput()
		Expect(ctx.Err()).NotTo(HaveOccurred(), "ext-authz did not exit: %s", out)
		var exitErr *exec.ExitError
		Expect(err).To(BeAssignableToTypeOf(exitErr), "want a non-zero exit: %s", out)
		return string(out), err.(*exec.ExitError).ExitCode()
	}

	DescribeTable("fails fast on bad flags",
		func(args []string, want string) {
			out, code := run(append(args, "--kubeconfig="+kcp.KubeconfigPath)...)
			Expect(code).To(Equal(2))
			Expect(out).To(ContainSubstring(want))
		},
		Entry("namespace not a DNS label", []string{"--kyma-namespace=Kcp_System"}, "--kyma-namespace"),
		Entry("address without port", []string{"--grpc-addr=localhost"}, "--grpc-addr"),
		Entry("same address twice", []string{"--metrics-bind-address=:18080", "--health-probe-bind-address=:18080"}, "must differ"),
		Entry("CA file without certificates", []string{"--ca-file=/dev/null"}, "--ca-file"),
		Entry("unknown flag", []string{"--no-such-flag"}, "no-such-flag"),
		Entry("stray argument", []string{"extra"}, "unexpected arguments"),
	)

	It("fails fast when the kubeconfig file does not exist", func() {
		out, code := run("--kubeconfig=/nonexistent/kubeconfig")
		Expect(code).To(Equal(2))
		Expect(out).To(ContainSubstring("--kubeconfig"))
	})

	It("fails fast when the API server cannot be reached", func() {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		Expect(err).NotTo(HaveOccurred())
		addr := lis.Addr().String()
		Expect(lis.Close()).To(Succeed()) // nothing listens there now
		kc := clientcmdapi.NewConfig()
		kc.Clusters["x"] = &clientcmdapi.Cluster{Server: "https://" + addr, InsecureSkipTLSVerify: true}
		kc.AuthInfos["x"] = &clientcmdapi.AuthInfo{Token: "t"}
		kc.Contexts["x"] = &clientcmdapi.Context{Cluster: "x", AuthInfo: "x"}
		kc.CurrentContext = "x"
		path := filepath.Join(GinkgoT().TempDir(), "down.kubeconfig")
		Expect(clientcmd.WriteToFile(*kc, path)).To(Succeed())

		out, code := run("--kubeconfig="+path, "--api-timeout=2s", "--grpc-addr=127.0.0.1:0", "--health-probe-bind-address=127.0.0.1:0", "--metrics-bind-address=127.0.0.1:0")
		Expect(code).To(Equal(1))
		Expect(out).To(ContainSubstring("not reachable"))
	})

	It("stops gracefully on SIGTERM", func() {
		p, err := extauthz.Start(binary, GinkgoWriter, startTimeout, "--kubeconfig="+kcp.KubeconfigPath)
		Expect(err).NotTo(HaveOccurred())
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		Expect(p.Stop(15 * time.Second)).To(Succeed())
		Expect(p.ExitCode()).To(Equal(0))
	})
})

func ptr[T any](v T) *T { return &v }
