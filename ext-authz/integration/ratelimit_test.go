package integration_test

import (
	"context"
	"strconv"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// The rate limit per runtime in the real binary: the class comes from the
// Kyma CR's label as the API server serves it (through the store's
// trimmed list and watch), a runtime of the limited class is answered 429
// with Retry-After after its burst, a runtime without the label keeps the
// default, and the decisions are counted without a runtime label.
var _ = Describe("ext-authz rate limit per runtime", Ordered, func() {
	var authz authv3.AuthorizationClient
	var p *extauthz.Process

	BeforeAll(func() {
		createKyma(kymaNamespace, "runtime-trial", "trial.example.com", map[string]string{ratelimit.DefaultClassLabel: "trial"})
		createKyma(kymaNamespace, "runtime-paid", "paid.example.com", map[string]string{ratelimit.DefaultClassLabel: "aws"})
		p = startExtAuthz("--kyma-namespace="+kymaNamespace, "--rate-limit-classes=trial=0.01/3")
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		authz = authv3.NewAuthorizationClient(conn)
	})

	check := func(l string) decision {
		GinkgoHelper()
		resp, err := authz.Check(context.Background(), extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: l}))
		Expect(err).NotTo(HaveOccurred())
		return decisionOf(resp)
	}

	It("answers a runtime of a limited class 429 with Retry-After after its burst, and leaves the others", func() {
		trial, paid := xfccOf(issue("runtime-trial", "trial.example.com")), xfccOf(issue("runtime-paid", "paid.example.com"))
		for range 3 {
			Expect(check(trial)).To(Equal(allowedAs("runtime-trial", "trial.example.com")))
		}
		d := check(trial)
		Expect(d.GRPCCode).To(Equal(codes.ResourceExhausted))
		Expect(d.HTTPCode).To(Equal(typev3.StatusCode_TooManyRequests))
		Expect(d.Reason).To(Equal(contract.ReasonRateLimited))
		ra, err := strconv.Atoi(d.Headers["retry-after"])
		Expect(err).NotTo(HaveOccurred())
		Expect(ra).To(BeNumerically("~", 100, 1), "seconds until the next token at 0.01/s")
		for range 20 { // the default limit (burst 10,000)
			Expect(check(paid)).To(Equal(allowedAs("runtime-paid", "paid.example.com")))
		}

		text, err := p.Metrics()
		Expect(err).NotTo(HaveOccurred())
		limited, _ := promtext.Sum(text, "runtime_watcher_ext_authz_decisions_total", map[string]string{"result": "deny", "reason": "rate-limited"})
		Expect(limited).To(BeNumerically("==", 1))
		buckets, found := promtext.Sum(text, "runtime_watcher_ext_authz_rate_limit_buckets", nil)
		Expect(found).To(BeTrue())
		Expect(buckets).To(BeNumerically("==", 2))
		Expect(text).NotTo(ContainSubstring(`runtime="runtime-trial"`), "a metric with a runtime label")
	})
})
