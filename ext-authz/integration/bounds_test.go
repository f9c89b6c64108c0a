package integration_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// extAuthzMemoryLimit is the container limit in manifests/kcp/base/ext-authz.yaml.
const extAuthzMemoryLimit = 256 << 20

// padded is a Check with a valid XFCC and a request body of size bytes
// (Envoy forwards bodies when with_request_body is set; an attacker that
// reaches the port sends what it likes).
func padded(xfccHeader string, size int) *authv3.CheckRequest {
	req := extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: xfccHeader})
	req.Attributes.Request.Http.Body = strings.Repeat("x", size)
	return req
}

var _ = Describe("ext-authz under hostile callers", Label("bounds"), func() {
	It("refuses Checks over 256 KiB before decoding, survives 64 concurrent 4 MiB ones under 256 MiB, and allows a valid request right after", func(ctx SpecContext) {
		createKyma(kymaNamespace, "runtime-bounds", "skr-bounds.example.com", nil)
		good := xfccOf(issue("runtime-bounds", "skr-bounds.example.com"))
		GinkgoT().Setenv("MEMORY_LIMIT", fmt.Sprint(extAuthzMemoryLimit)) // inherited by the binary, as the downward API sets it
		p := startExtAuthz("--kyma-namespace=" + kymaNamespace)
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())

		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		authz := authv3.NewAuthorizationClient(conn)
		// Under the bound: decoded and decided.
		resp, err := authz.Check(ctx, padded(good, 200<<10))
		Expect(err).NotTo(HaveOccurred())
		Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-bounds", "skr-bounds.example.com")))
		// Over it: refused by gRPC.
		_, err = authz.Check(ctx, padded(good, 260<<10))
		Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "error %v", err)

		// 64 concurrent 4 MiB Checks, each on its own connection.
		const attackers = 64
		huge := padded(good, 4<<20)
		var wg sync.WaitGroup
		codesSeen := make(chan codes.Code, attackers)
		for range attackers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := p.Dial()
				if err != nil {
					codesSeen <- codes.Unknown
					return
				}
				defer c.Close()
				cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				defer cancel()
				_, err = authv3.NewAuthorizationClient(c).Check(cctx, huge)
				codesSeen <- status.Code(err)
			}()
		}
		wg.Wait()
		close(codesSeen)
		for code := range codesSeen {
			Expect(code).To(Equal(codes.ResourceExhausted))
		}
		Expect(p.Healthy()).To(BeTrue())
		resp, err = authz.Check(ctx, extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: good}))
		Expect(err).NotTo(HaveOccurred())
		Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-bounds", "skr-bounds.example.com")))
		hwm, err := testenv.ProcStatus(p.Cmd.Process.Pid, "VmHWM")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("ext-authz VmHWM after %d concurrent 4 MiB Checks: %.1f MiB\n", attackers, float64(hwm)/(1<<20))
		Expect(hwm).To(BeNumerically("<", 256<<20))
	})
})
