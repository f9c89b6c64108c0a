package e2e_test

import (
	"net"
	"net/url"
	"os"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
)

// Issue 40: `make run` served pilot-agent's status port (with
// /debug/pprof) and Envoy's stats and readiness listeners on every
// interface of the developer's machine. The local environment — the one
// `make run` starts — binds every debug, stats, status and metrics port to
// loopback; only the gateway's own port, where runtimes connect, is on
// every interface.
var _ = Describe("The local environment's ports", Label("adversary"), func() {
	It("binds no debug, stats, status or metrics port to every interface", func() {
		if _, ok := env.(e2e.HealthEnvironment); !ok {
			Fail("the " + envName() + " environment's processes run elsewhere: leave out the adversary label there")
		}
		u, err := url.Parse(env.GatewayURL())
		Expect(err).NotTo(HaveOccurred())
		_, gatewayPort, err := net.SplitHostPort(u.Host)
		Expect(err).NotTo(HaveOccurred())
		listeners, err := localenv.WildcardListeners(os.Getpid())
		Expect(err).NotTo(HaveOccurred())
		for _, l := range listeners {
			_, port, err := net.SplitHostPort(l.Addr)
			Expect(err).NotTo(HaveOccurred())
			Expect(port).To(Equal(gatewayPort), "%v listens on every interface", l)
		}
	})
})
