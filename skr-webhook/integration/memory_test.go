package integration

import (
	"bytes"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionv1 "k8s.io/api/admission/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// bundleMemoryLimit is the memory limit of the skr-webhook container in the
// bundle (manifests/skr/deployment.yaml), passed as the downward API does.
const bundleMemoryLimit = 128 << 20

// largeReview is an UPDATE review of about size bytes whose spec changed,
// with the keys of one side in reverse order (the comparison has to walk
// both sides, the worst case).
func largeReview(uid string, size int) []byte {
	const value = 200
	n := size / 2 / (value + 24)
	spec := func(reverse bool, last string) string {
		var sb strings.Builder
		sb.Grow(n * (value + 24))
		sb.WriteByte('{')
		for i := range n {
			k := i
			if reverse {
				k = n - 1 - i
			}
			if i > 0 {
				sb.WriteByte(',')
			}
			v := strings.Repeat("v", value)
			if k == n-1 {
				v = last + v[len(last):]
			}
			fmt.Fprintf(&sb, `"key-%08d":"%s"`, k, v)
		}
		sb.WriteByte('}')
		return sb.String()
	}
	return []byte(`{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"` + uid + `",` +
		`"kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},"operation":"UPDATE","name":"big","namespace":"` + namespace + `",` +
		`"object":{"metadata":{"name":"big"},"spec":` + spec(false, "new") + `},"oldObject":{"metadata":{"name":"big"},"spec":` + spec(true, "old") + `}}}`)
}

var _ = Describe("skr-webhook under hostile load", Label("bounds"), func() {
	It("keeps its memory under 128 MiB with 8 concurrent 6.5 MiB reviews, three times, and answers every one", func(ctx SpecContext) {
		binary, err := testenv.BuildBinary("skr-webhook")
		Expect(err).NotTo(HaveOccurred())
		p, err := startProcessEnv(binary, []string{fmt.Sprintf("MEMORY_LIMIT=%d", bundleMemoryLimit)},
			"--listen-addr", testenv.FreeAddr(), "--metrics-bind-address", testenv.FreeAddr(), "--health-probe-bind-address", testenv.FreeAddr(),
			"--tls-cert-file", filepath.Join(certDir, "tls.crt"), "--tls-key-file", filepath.Join(certDir, "tls.key"),
			"--ca-file", filepath.Join(certDir, "kcp-ca.crt"), "--kcp-addr", stub.Addr(), "--max-reviews-in-flight", "4",
		)
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(p.kill)
		Eventually(func() int { return p.get("/readyz") }).Should(Equal(http.StatusOK))
		// Measured as it runs in the bundle: in FIPS mode, its default (fips.go).
		Expect(p.metric("runtime_watcher_skr_webhook_fips140_enabled")).To(BeEquivalentTo(1), "the webhook runs without Go's FIPS 140-3 module")

		// HTTP/2 over TLS, as the API server calls webhooks; the certificate is
		// checked for 127.0.0.1 (the rotation spec may replace it by one
		// without the Service names).
		hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig:   &tls.Config{RootCAs: skrCA.Pool()},
			ForceAttemptHTTP2: true,
		}}
		const concurrent, rounds, size = 8, 3, 6<<20 + 512<<10
		for round := range rounds {
			var wg sync.WaitGroup
			errs := make(chan error, concurrent)
			for i := range concurrent {
				wg.Add(1)
				go func() {
					defer wg.Done()
					uid := fmt.Sprintf("uid-%d-%d", round, i)
					body := largeReview(uid, size)
					if len(body) < 6<<20 || len(body) > contract.MaxAdmissionBodyBytes {
						errs <- fmt.Errorf("review of %d bytes, want about 6.5 MiB", len(body))
						return
					}
					resp, err := hc.Post("https://"+p.listenAddr+contract.ValidatePath(manager), "application/json", bytes.NewReader(body))
					if err != nil {
						errs <- err
						return
					}
					defer resp.Body.Close()
					out, _ := io.ReadAll(resp.Body)
					var review admissionv1.AdmissionReview
					if resp.StatusCode != http.StatusOK || json.Unmarshal(out, &review) != nil || review.Response == nil ||
						!review.Response.Allowed || string(review.Response.UID) != uid {
						errs <- fmt.Errorf("review %s: %d %s", uid, resp.StatusCode, out)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				Expect(err).NotTo(HaveOccurred())
			}
		}
		answered := p.metric("runtime_watcher_skr_webhook_admission_requests_total", "manager", manager, "result", "emitted") +
			p.metric("runtime_watcher_skr_webhook_admission_requests_total", "manager", manager, "result", "overflow")
		Expect(answered).To(BeEquivalentTo(concurrent * rounds))
		Expect(p.metric("runtime_watcher_skr_webhook_admission_requests_total", "manager", manager, "result", "emitted")).
			To(BeNumerically(">=", rounds), "at least one review per round was decoded")
		hwm, err := testenv.ProcStatus(p.cmd.Process.Pid, "VmHWM")
		Expect(err).NotTo(HaveOccurred())
		GinkgoWriter.Printf("skr-webhook (FIPS mode) VmHWM after %d×%d reviews of 6.5 MiB: %.1f MiB\n", rounds, concurrent, float64(hwm)/(1<<20))
		Expect(hwm).To(BeNumerically("<", 128<<20))
		Expect(p.get("/healthz")).To(Equal(http.StatusOK))
	})
})
