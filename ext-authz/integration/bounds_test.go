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
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
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

var _ = Describe("ext-authz under callers that never finish a message", Label("bounds"), func() {
	It("holds --max-total-streams (256) stalled 255 KiB messages of 63 connections x 128 streams under 256 MiB, refuses the other streams and valid Checks meanwhile with RESOURCE_EXHAUSTED, and allows a valid Check once the attackers go", func(ctx SpecContext) {
		createKyma(kymaNamespace, "runtime-stall", "skr-stall.example.com", nil)
		good := extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-stall", "skr-stall.example.com"))})
		GinkgoT().Setenv("MEMORY_LIMIT", fmt.Sprint(extAuthzMemoryLimit))
		// --check-timeout at its most: this spec measures the stream bound
		// alone (the default 2s would end the stalled streams).
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--check-timeout=5m")
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())

		// The gateway's connection, open before the attack (--max-connections
		// is 64: the attackers take the other 63).
		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		authz := authv3.NewAuthorizationClient(conn)
		resp, err := authz.Check(ctx, good)
		Expect(err).NotTo(HaveOccurred())
		Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-stall", "skr-stall.example.com")))

		// Unbounded, this would pin 63 x 128 x 255 KiB ≈ 2 GiB.
		const conns, perConn, msgLen, maxTotal = 63, 128, 255 << 10, 256
		attackers := make([]*stallConn, conns)
		for i := range attackers {
			attackers[i], err = dialStall(p.GRPCAddr)
			Expect(err).NotTo(HaveOccurred())
			a := attackers[i]
			DeferCleanup(func() { _ = a.Close() }) // also closed below
		}
		results := make([]stallResult, conns)
		errs := make([]error, conns)
		start := time.Now()
		var wg sync.WaitGroup
		for i, a := range attackers {
			wg.Go(func() { results[i], errs[i] = a.stall(perConn, msgLen, 16<<10, 3*time.Minute) })
		}
		wg.Wait()
		stalled, resets, statuses := 0, 0, map[codes.Code]int{}
		for i, r := range results {
			Expect(errs[i]).NotTo(HaveOccurred(), "attacker %d", i)
			stalled += r.stalled
			resets += r.resets
			for c, n := range r.statuses {
				statuses[c] += n
			}
		}
		GinkgoWriter.Printf("%d streams in %s: %d stalled with %d of %d bytes sent, answered %v, %d reset\n",
			conns*perConn, time.Since(start).Round(time.Millisecond), stalled, msgLen-1, msgLen, statuses, resets)
		Expect(stalled).To(Equal(maxTotal))
		Expect(statuses).To(Equal(map[codes.Code]int{codes.ResourceExhausted: conns*perConn - maxTotal}))
		Expect(resets).To(BeZero())

		// While the attack holds: alive, every slot taken, Checks refused
		// (fail closed: Envoy denies), memory bounded.
		Expect(p.Healthy()).To(BeTrue())
		text, err := p.Metrics()
		Expect(err).NotTo(HaveOccurred())
		inFlight, found := promtext.Sum(text, "runtime_watcher_ext_authz_streams_in_flight", nil)
		Expect(found).To(BeTrue())
		Expect(inFlight).To(BeNumerically("==", maxTotal))
		_, err = authz.Check(ctx, good)
		Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "error %v", err)
		held, err := testenv.ProcStatus(p.Cmd.Process.Pid, "VmRSS")
		Expect(err).NotTo(HaveOccurred())

		for _, a := range attackers {
			Expect(a.Close()).To(Succeed())
		}
		Eventually(func(g Gomega) {
			resp, err := authz.Check(ctx, good)
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-stall", "skr-stall.example.com")))
		}).WithTimeout(10 * time.Second).Should(Succeed())
		Expect(p.Healthy()).To(BeTrue())
		hwm, err := testenv.ProcStatus(p.Cmd.Process.Pid, "VmHWM")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("ext-authz VmRSS while %d streams held %d KiB each: %.1f MiB; VmHWM: %.1f MiB\n",
			stalled, (msgLen-1)>>10, float64(held)/(1<<20), float64(hwm)/(1<<20))
		Expect(hwm).To(BeNumerically("<", extAuthzMemoryLimit))
	})
})
