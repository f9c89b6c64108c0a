package e2e_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/ext-authz/ratelimit"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/extauthz"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

// Fairness per runtime at the edge (docs/architecture.md, "Edge protection
// per identity"), through the real gateway: Envoy configured by istiod,
// ext-authz deciding the rate limit in process. Runtime A (a Kyma of the
// environment's low-limit class, a client certificate of its own) floods
// the gateway at 20 times its limit — far below what the gateway takes on
// this machine, so the spec measures isolation, not CPU contention — while
// the sample runtime B makes SKR writes that its skr-webhook delivers.
// B's write→operator latencies are measured once quiet and once under the
// flood, in the same spec.
var _ = Describe("Fairness per runtime (real Envoy)", Ordered, Label("fairness"), func() {
	const (
		writes     = 100 // per phase: p99 is the second slowest
		objects    = 20  // B's objects the writes rotate over (the webhook sends one object at most once per second)
		timesLimit = 20
	)
	var (
		n              sample
		label, class   string
		limit          ratelimit.Limit
		is             e2e.IstioControls
		bObjects       []*unstructured.Unstructured
		quiet, flooded []time.Duration
	)

	BeforeAll(func(ctx SpecContext) {
		fe, ok := env.(e2e.FairnessEnvironment)
		if !ok {
			Fail("the fairness spec needs an ext-authz with a low-limit class (the local environment)")
		}
		ie, ok := env.(e2e.IstioEnvironment)
		if !ok {
			Fail("the fairness spec reads ext-authz's log (the local environment)")
		}
		is = ie.Istio()
		label, class, limit = fe.LowLimitClass()
		n = sample(env.Names())
		pathReady(ctx, n)
		for i := range objects {
			k := n.watchedKyma(fmt.Sprintf("fair-b-%d", i))
			Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, k))).To(Succeed())
			bObjects = append(bObjects, k)
		}
		for _, k := range bObjects {
			Eventually(func() []e2e.Event { return received.For(n.SKRNamespace, k.GetName(), time.Time{}) }).ShouldNot(BeEmpty())
		}
	})

	// writeLatencies makes writes SKR writes of B, one at a time over its
	// objects, and returns the time from the start of each write to the
	// operator's event about it; a write whose event does not arrive
	// within 30 s fails the spec (an event of B lost).
	writeLatencies := func(ctx context.Context, phase string) []time.Duration {
		GinkgoHelper()
		out := make([]time.Duration, 0, writes)
		for i := range writes {
			k := bObjects[i%objects]
			start := time.Now()
			Expect(setSpec(ctx, k, fmt.Sprintf("%s-%d", phase, i))).To(Succeed())
			var evs []e2e.Event
			Eventually(func() []e2e.Event {
				evs = received.For(n.SKRNamespace, k.GetName(), start)
				return evs
			}).WithTimeout(30*time.Second).ShouldNot(BeEmpty(), "%s: B's change %d of %s lost", phase, i, k.GetName())
			out = append(out, evs[0].Time.Sub(start))
		}
		return out
	}

	It("keeps runtime B's write→operator p99 within 2× of quiet while runtime A floods at 20× its limit", func(ctx SpecContext) {
		quiet = writeLatencies(ctx, "quiet")

		// Runtime A: a Kyma of the low-limit class and its certificate.
		idA := "fair-a"
		domain := idA + ".fairness.example.com"
		kyma := extauthz.Kyma(n.KymaNamespace, idA, domain, map[string]string{contract.LabelRuntimeID: idA, label: class})
		Expect(env.KCP().Create(ctx, kyma)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, kyma)).To(Succeed()) })
		cert, err := env.IssueClientCert(pki.LeafOptions{CommonName: idA, DNSNames: []string{domain}})
		Expect(err).NotTo(HaveOccurred())
		f := newFlooder(&cert, n)
		Eventually(func(ctx context.Context) int { return f.post(ctx, "fair-a-warmup").status }).WithContext(ctx).
			WithTimeout(30*time.Second).Should(Equal(http.StatusOK), "ext-authz does not know runtime A yet")

		rate := timesLimit * limit.Rate
		floodCtx, stop := context.WithCancel(ctx)
		began := time.Now()
		done := make(chan struct{})
		go func() { defer close(done); f.flood(floodCtx, rate) }()
		flooded = writeLatencies(ctx, "flooded")
		stop()
		<-done
		took := time.Since(began)

		q, fl := loadgen.Summarize(quiet, 0), loadgen.Summarize(flooded, 0)
		sent, ok, limited := f.sent.Load(), f.ok.Load(), f.limited.Load()
		AddReportEntry("fairness", fmt.Sprintf(
			"A's limit %s/s burst %d; A sent %d requests in %s (%.0f/s, %.1f× its limit): %d allowed, %d answered 429 (%d with Retry-After), %d 503 of a listener replica, %d other (%v)\n"+
				"B's write→operator over %d writes each: quiet p50 %s p99 %s max %s; under A's flood p50 %s p99 %s max %s (p99 %.2f× quiet)",
			fmt.Sprint(limit.Rate), limit.Burst, sent, took.Round(time.Millisecond), float64(sent)/took.Seconds(), float64(sent)/took.Seconds()/limit.Rate, ok, limited, f.retryAfter.Load(),
			f.unavailable.Load(), f.otherCount(), f.otherStatuses(), writes, q.P50, q.P99, q.Max, fl.P50, fl.P99, fl.Max, float64(fl.P99)/float64(q.P99)))

		Expect(float64(sent)/took.Seconds()).To(BeNumerically(">=", 0.9*rate), "the flooder did not reach 20× A's limit")
		Expect(limited).To(BeNumerically(">", 0), "the flooder got no 429")
		Expect(f.retryAfter.Load()).To(Equal(limited), "a 429 without Retry-After")
		Expect(f.otherCount()).To(BeZero(), "the flooder got answers other than 200 and 429: %v", f.otherStatuses())
		Expect(fl.P99).To(BeNumerically("<=", 2*q.P99), "B's p99 under A's flood (%s) beyond 2× quiet (%s)", fl.P99, q.P99)

		// What reached the operator of A: never more than A's limit's worth.
		// A window of 1 s may hold burst + rate·1 s Checks ext-authz
		// allowed; 200 ms of the path's jitter between the Check and the
		// operator are allowed on top.
		allowedTotal := float64(limit.Burst) + limit.Rate*took.Seconds() + 1
		Expect(float64(ok)).To(BeNumerically("<=", allowedTotal), "ext-authz allowed more of A than its limit")
		var times []time.Time
		Eventually(func() int {
			times = eventsOf(idA, began)
			return len(times)
		}).Should(BeNumerically(">=", int(ok)), "A's allowed events at the operator")
		perWindow := float64(limit.Burst) + math.Ceil(limit.Rate*1.2)
		most := mostInWindow(times, time.Second)
		AddReportEntry("fairness: A at the operator", fmt.Sprintf("%d events of A; at most %d in any 1 s (bound %.0f)", len(times), most, perWindow))
		Expect(len(times)).To(BeNumerically("<=", int(ok)), "A's events at the operator beyond what ext-authz allowed")
		Expect(float64(most)).To(BeNumerically("<=", perWindow), "the operator held more than A's limit's worth of A's events in 1 s")

		// The decision log names A as the runtime over its limit, without a
		// line per refused request.
		Eventually(func() (string, error) {
			b, err := os.ReadFile(is.ExtAuthzLog())
			return string(b), err
		}).WithTimeout(30*time.Second).Should(
			MatchRegexp(`runtimes over their rate limit.*"runtimes":\["`+idA+`"`), "no report naming A in ext-authz's log")
		Expect(decisionsWithReason(is.ExtAuthzLog(), idA, string(contract.ReasonRateLimited))).To(BeZero(), "a decision log line per rate-limited request")
	})
})

// eventsOf are the times the operator received events of runtime id at or
// after since.
func eventsOf(id string, since time.Time) []time.Time {
	received.mu.Lock()
	defer received.mu.Unlock()
	var out []time.Time
	for _, ev := range received.events {
		if ev.RuntimeID == id && !ev.Time.Before(since) {
			out = append(out, ev.Time)
		}
	}
	slices.SortFunc(out, func(a, b time.Time) int { return a.Compare(b) })
	return out
}

// mostInWindow is the largest number of sorted times within any window of
// length w.
func mostInWindow(times []time.Time, w time.Duration) int {
	most, j := 0, 0
	for i := range times {
		for times[i].Sub(times[j]) >= w {
			j++
		}
		most = max(most, i-j+1)
	}
	return most
}

// decisionsWithReason counts the decision log lines of runtime id with the
// given reason.
func decisionsWithReason(logFile, id, reason string) int {
	GinkgoHelper()
	count := 0
	for _, d := range decisions(logFile, id) {
		if d.Reason == reason {
			count++
		}
	}
	return count
}

// flooder posts events of one runtime to the gateway, counting the answers.
type flooder struct {
	client *http.Client
	n      sample

	sent, ok, limited, retryAfter atomic.Int64
	// unavailable: 503s of the listener (a replica that is not the
	// leader, when Envoy's retries met it again): not the edge's refusal
	unavailable atomic.Int64
	mu          sync.Mutex
	other       map[string]int
}

type answer struct {
	status int
	header http.Header
}

func newFlooder(cert *tls.Certificate, n sample) *flooder {
	c := env.HTTPClient(cert)
	t := c.Transport.(*http.Transport).Clone()
	t.ForceAttemptHTTP2 = true // one connection, as a webhook's client
	t.MaxIdleConnsPerHost = 64
	return &flooder{client: &http.Client{Timeout: c.Timeout, Transport: t}, n: n, other: map[string]int{}}
}

func (f *flooder) post(ctx context.Context, name string) answer {
	body, _ := json.Marshal(probeEvent(f.n, name))
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, env.GatewayURL()+contract.EventPath(f.n.Manager), bytes.NewReader(body))
	if err != nil {
		return answer{}
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := f.client.Do(req)
	if err != nil {
		return answer{}
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return answer{resp.StatusCode, resp.Header}
}

// flood posts at rate per second until ctx ends: open loop, each request
// on its own goroutine, at most 64 in flight; every 10 ms it sends what is
// due since the start, so a late tick does not lower the rate.
func (f *flooder) flood(ctx context.Context, rate float64) {
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	slots := make(chan struct{}, 64)
	var wg sync.WaitGroup
	defer wg.Wait()
	start := time.Now()
	for i := 0; ctx.Err() == nil; i++ {
		if float64(i) >= rate*time.Since(start).Seconds() {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			i--
			continue
		}
		select {
		case slots <- struct{}{}:
		default:
			f.note("skipped: 64 in flight")
			continue
		}
		wg.Add(1)
		go func() {
			defer func() { <-slots; wg.Done() }()
			f.sent.Add(1)
			a := f.post(context.WithoutCancel(ctx), fmt.Sprintf("fair-a-%d", i))
			switch a.status {
			case http.StatusOK:
				f.ok.Add(1)
			case http.StatusServiceUnavailable:
				f.unavailable.Add(1)
			case http.StatusTooManyRequests:
				f.limited.Add(1)
				if a.header.Get("Retry-After") != "" && a.header.Get(contract.HeaderDenyReason) == string(contract.ReasonRateLimited) {
					f.retryAfter.Add(1)
				}
			default:
				f.note(fmt.Sprint(a.status))
			}
		}()
	}
}

func (f *flooder) note(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.other[what]++
}

func (f *flooder) otherCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	total := 0
	for _, c := range f.other {
		total += c
	}
	return total
}

func (f *flooder) otherStatuses() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	parts := make([]string, 0, len(f.other))
	for k, c := range f.other {
		parts = append(parts, fmt.Sprintf("%s: %d", k, c))
	}
	slices.Sort(parts)
	return strings.Join(parts, ", ")
}
