package integration_test

import (
	"fmt"
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

var _ = Describe("ext-authz under callers that send tiny DATA frames", Label("bounds"), func() {
	It("closes 12 connections whose 24 streams send 255 KiB messages as 1-byte DATA frames, stays under 256 MiB and allows a valid Check after", func(ctx SpecContext) {
		createKyma(kymaNamespace, "runtime-tiny", "skr-tiny.example.com", nil)
		good := extauthz.CheckRequest("lifecycle-manager", map[string]string{contract.HeaderXFCC: xfccOf(issue("runtime-tiny", "skr-tiny.example.com"))})
		GinkgoT().Setenv("MEMORY_LIMIT", fmt.Sprint(extAuthzMemoryLimit))
		// --check-timeout at its most: the frame bound alone must hold.
		p := startExtAuthz("--kyma-namespace="+kymaNamespace, "--check-timeout=5m")
		Eventually(p.Ready).WithTimeout(startTimeout).Should(BeTrue())

		// Unbounded, grpc-go keeps ~60 bytes per 1-byte frame: 24 x 255 KiB
		// of them is ~370 MiB (24 x 255 KiB x ~60 B).
		const conns, perConn, msgLen = 12, 2, 255 << 10
		attackers := make([]*stallConn, conns)
		for i := range attackers {
			var err error
			attackers[i], err = dialStall(p.GRPCAddr)
			Expect(err).NotTo(HaveOccurred())
			a := attackers[i]
			DeferCleanup(func() { _ = a.Close() })
		}
		errs := make([]error, conns)
		results := make([]stallResult, conns)
		start := time.Now()
		var wg sync.WaitGroup
		for i, a := range attackers {
			wg.Go(func() { results[i], errs[i] = a.stall(perConn, msgLen, 1, 3*time.Minute) })
		}
		wg.Wait()
		cut, stalled := 0, 0
		for i := range attackers {
			if errs[i] != nil {
				cut++
			}
			stalled += results[i].stalled
		}
		GinkgoWriter.Printf("%d connections x %d streams of %d KiB in 1-byte frames, %s: %d connections closed by ext-authz, %d streams sent all but the last byte\n",
			conns, perConn, msgLen>>10, time.Since(start).Round(time.Millisecond), cut, stalled)
		hwm, err := testenv.ProcStatus(p.Cmd.Process.Pid, "VmHWM")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("ext-authz VmHWM after the tiny-frames attack: %.1f MiB\n", float64(hwm)/(1<<20))
		Expect(p.Healthy()).To(BeTrue())
		Expect(hwm).To(BeNumerically("<", extAuthzMemoryLimit))
		Expect(cut).To(Equal(conns), "every attacking connection closed: %v", errs)
		Expect(stalled).To(BeZero())
		text, err := p.Metrics()
		Expect(err).NotTo(HaveOccurred())
		closed, found := promtext.Sum(text, "runtime_watcher_ext_authz_connections_closed_total", map[string]string{"reason": "small_frames"})
		Expect(found).To(BeTrue())
		Expect(closed).To(BeNumerically("==", conns))

		conn, err := p.Dial()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(conn.Close)
		resp, err := authv3.NewAuthorizationClient(conn).Check(ctx, good)
		Expect(err).NotTo(HaveOccurred())
		Expect(decisionOf(resp)).To(Equal(allowedAs("runtime-tiny", "skr-tiny.example.com")))
	})
})
