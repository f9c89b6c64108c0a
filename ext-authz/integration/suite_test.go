package integration_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

const (
	kymaNamespace  = "kcp-system"
	otherNamespace = "other-system"
	startTimeout   = 60 * time.Second
)

var (
	env    *testenv.Env
	kcp    *testenv.Cluster
	binary string
	ca     *pki.CA
)

func TestIntegration(t *testing.T) {
	testenv.SkipIfShort(t)
	RegisterFailHandler(Fail)
	RunSpecs(t, "ext-authz integration")
}

var _ = BeforeSuite(func() {
	var err error
	binary, err = testenv.BuildBinary("ext-authz")
	Expect(err).NotTo(HaveOccurred())
	env, err = testenv.Start("kcp")
	Expect(err).NotTo(HaveOccurred())
	kcp = env.Cluster("kcp")
	for _, ns := range []string{kymaNamespace, otherNamespace} {
		Expect(kcp.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}})).To(Succeed())
	}
	ca, err = pki.NewCA("integration-ca")
	Expect(err).NotTo(HaveOccurred())
})

var _ = AfterSuite(func() {
	if env != nil {
		Expect(env.Stop()).To(Succeed())
	}
})

// startExtAuthz starts the binary against the KCP and stops it (expecting a
// clean exit) when the spec or container ends.
func startExtAuthz(args ...string) *extauthz.Process {
	GinkgoHelper()
	if !hasArg(args, "--kubeconfig") {
		args = append(args, "--kubeconfig="+kcp.KubeconfigPath)
	}
	p, err := extauthz.Start(binary, GinkgoWriter, startTimeout, append(args, "--zap-log-level=debug")...)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		Expect(p.Stop(15 * time.Second)).To(Succeed())
		Expect(p.ExitCode()).To(Equal(0), "exit code after SIGTERM")
	})
	return p
}

func hasArg(args []string, name string) bool {
	for _, a := range args {
		if len(a) >= len(name) && a[:len(name)] == name {
			return true
		}
	}
	return false
}

func issue(cn string, dns ...string) *pki.Leaf {
	GinkgoHelper()
	l, err := ca.Issue(pki.LeafOptions{CommonName: cn, DNSNames: dns})
	Expect(err).NotTo(HaveOccurred())
	return l
}

func xfccOf(l *pki.Leaf) string {
	return extauthz.GatewayXFCC(l.CertPEM, l.Cert.Subject.CommonName, l.Cert.DNSNames)
}

func writeFile(name string, data []byte) string {
	GinkgoHelper()
	path := filepath.Join(GinkgoT().TempDir(), name)
	Expect(os.WriteFile(path, data, 0o600)).To(Succeed())
	return path
}

// decision is what a CheckResponse tells Envoy to do.
type decision struct {
	GRPCCode codes.Code
	HTTPCode typev3.StatusCode // 0 for allow
	Reason   contract.DenyReason
	Headers  map[string]string // allow: upstream headers; deny: response headers
}

func decisionOf(resp *authv3.CheckResponse) decision {
	d := decision{GRPCCode: codes.Code(resp.GetStatus().GetCode()), Headers: map[string]string{}}
	var hs []*corev3.HeaderValueOption
	if ok := resp.GetOkResponse(); ok != nil {
		hs = ok.GetHeaders()
	}
	if den := resp.GetDeniedResponse(); den != nil {
		d.HTTPCode = den.GetStatus().GetCode()
		hs = den.GetHeaders()
	}
	for _, h := range hs {
		d.Headers[h.GetHeader().GetKey()] = h.GetHeader().GetValue()
	}
	d.Reason = contract.DenyReason(d.Headers[contract.HeaderDenyReason])
	return d
}

func allowedAs(runtimeID, domain string) decision {
	return decision{GRPCCode: codes.OK, Headers: map[string]string{contract.HeaderRuntimeID: runtimeID, contract.HeaderSKRDomain: domain}}
}

func deniedFor(reason contract.DenyReason) decision {
	return decision{GRPCCode: codes.PermissionDenied, HTTPCode: typev3.StatusCode_Forbidden, Reason: reason,
		Headers: map[string]string{contract.HeaderDenyReason: string(reason), "content-type": "application/json"}}
}

func notReady() decision {
	return decision{GRPCCode: codes.Unavailable, HTTPCode: typev3.StatusCode_ServiceUnavailable, Reason: contract.ReasonNotReady,
		Headers: map[string]string{contract.HeaderDenyReason: string(contract.ReasonNotReady), "content-type": "application/json"}}
}
