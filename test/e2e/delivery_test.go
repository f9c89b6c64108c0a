package e2e_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
)

// Delivery (docs/architecture.md §4.8, issue 14): every change is followed by an
// event or a resync — never silence. These specs break the path on purpose,
// so they need an environment with delivery controls (the local one; the
// kind run leaves them out with -ginkgo.label-filter='!delivery').
var _ = Describe("Delivery", Ordered, Label("delivery"), func() {
	var (
		n sample
		d e2e.DeliveryControls
	)

	BeforeAll(func(ctx SpecContext) {
		de, ok := env.(e2e.DeliveryEnvironment)
		if !ok {
			Fail("the delivery specs need an environment with delivery controls (the local one); run the kind e2e with -ginkgo.label-filter='!delivery' -ginkgo.fail-on-empty, as test/kind/e2e.sh does")
		}
		d = de.Delivery()
		n = sample(env.Names())
		pathReady(ctx, n)
	})

	// createWatched creates watched Kymas and waits for their first events.
	createWatched := func(ctx context.Context, prefix string, count int) []*unstructured.Unstructured {
		var out []*unstructured.Unstructured
		for i := range count {
			k := n.watchedKyma(fmt.Sprintf("%s-%d", prefix, i))
			Expect(env.SKR().Create(ctx, k)).To(Succeed())
			out = append(out, k)
		}
		for _, k := range out {
			Eventually(func() int { return len(received.For(n.SKRNamespace, k.GetName(), time.Time{})) }).Should(BeNumerically(">=", 1))
		}
		return out
	}
	// allArrive checks that each object has an event received after since.
	allArrive := func(objs []*unstructured.Unstructured, since time.Time, timeout time.Duration) {
		for _, k := range objs {
			Eventually(func() int { return len(received.For(n.SKRNamespace, k.GetName(), since)) }).WithTimeout(timeout).
				Should(BeNumerically(">=", 1), "the last change of %s was not delivered", k.GetName())
		}
	}

	It("(e) runs the operator as 2 replicas with leader election: both ready, events reach it whichever replica the Service picks", func(ctx SpecContext) {
		ops := d.Operators()
		Expect(ops).To(HaveLen(2))
		consumers := 0
		for _, op := range ops {
			Expect(httpStatus(op.HealthURL+"/readyz")).To(Equal(http.StatusOK), "replica %s not ready", op.HealthURL)
			v, ok := promtext.Sum(fetchMetrics(ctx, op.MetricsURL), "runtime_watcher_listener_consumer_running", map[string]string{"manager": n.Manager})
			Expect(ok).To(BeTrue())
			consumers += int(v)
		}
		Expect(consumers).To(Equal(1), "exactly one replica (the leader) consumes events")

		objs := createWatched(ctx, "delivery-e", 10)
		since := time.Now()
		for _, k := range objs {
			Expect(setSpec(ctx, k, "replicas")).To(Succeed())
		}
		allArrive(objs, since, 30*time.Second)

		answers := d.ServiceAnswers()
		Expect(answers).To(HaveLen(2))
		AddReportEntry("answers of the operator replicas (status: count)", fmt.Sprint(answers))
		for i, a := range answers {
			Expect(a).NotTo(BeEmpty(), "the Service never picked replica %d", i)
		}
		// The non-leader sent the sender on (503), the leader accepted.
		Expect(answers[0][http.StatusServiceUnavailable] + answers[1][http.StatusServiceUnavailable]).To(BeNumerically(">=", 1))
		Expect(answers[0][http.StatusOK] + answers[1][http.StatusOK]).To(BeNumerically(">=", len(objs)))
	})

	// The answers of a roll-out — 404 (route not programmed yet) and 403
	// (ext-authz not caught up) — come from behind the gateway here: the
	// gateway is Envoy, which answers only for itself.
	It("(a) keeps retrying through 404 (route not programmed) and 403 (ext-authz not caught up) during a roll-out; every change arrives", func(ctx SpecContext) {
		objs := createWatched(ctx, "delivery-a", 3)
		var notFound, forbidden atomic.Int64
		var phase atomic.Int32 // 0: 404, 1: 403
		Expect(d.SetServiceFault(func(r *http.Request) (int, bool) {
			if !strings.HasPrefix(r.URL.Path, "/v2/") {
				return 0, false
			}
			if phase.Load() == 0 {
				notFound.Add(1)
				return http.StatusNotFound, true
			}
			forbidden.Add(1)
			return http.StatusForbidden, true
		})).To(Succeed())
		DeferCleanup(func() { Expect(d.SetServiceFault(nil)).To(Succeed()) })

		since := time.Now()
		for i, k := range objs {
			Expect(setSpec(ctx, k, fmt.Sprintf("rollout-404-%d", i))).To(Succeed())
		}
		Eventually(notFound.Load).Should(BeNumerically(">=", 2*len(objs)), "the webhook did not retry after 404")
		phase.Store(1)
		for i, k := range objs {
			Expect(setSpec(ctx, k, fmt.Sprintf("rollout-403-%d", i))).To(Succeed())
		}
		Eventually(forbidden.Load).Should(BeNumerically(">=", 2*len(objs)), "the webhook did not retry after 403")
		Expect(received.For(n.SKRNamespace, objs[0].GetName(), since)).To(BeEmpty(), "an event passed the injected faults")
		Expect(d.SetServiceFault(nil)).To(Succeed())
		allArrive(objs, since, time.Minute)
	})

	It("(b) after a SIGKILL with a backlog while the KCP is unreachable, sends a startup resync and then every later change", func(ctx SpecContext) {
		objs := createWatched(ctx, "delivery-b", 3)
		Expect(env.SetGatewayUp(ctx, false)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.SetGatewayUp(ctx, true)).To(Succeed()) })
		for i, k := range objs {
			Expect(setSpec(ctx, k, fmt.Sprintf("backlog-%d", i))).To(Succeed())
		}
		Expect(d.KillWebhook()).To(Succeed())
		restarted := time.Now()
		Expect(d.StartWebhook(ctx)).To(Succeed())
		Expect(env.SetGatewayUp(ctx, true)).To(Succeed())

		Eventually(func() int { return len(resyncs(n.RuntimeID, string(contract.ResyncStartup), restarted)) }).
			WithTimeout(time.Minute).Should(BeNumerically(">=", 1), "no startup resync after the restart")

		since := time.Now()
		for i, k := range objs {
			Expect(setSpec(ctx, k, fmt.Sprintf("after-restart-%d", i))).To(Succeed())
		}
		allArrive(objs, since, time.Minute)
	})

	It("(c) after a flood of 50,000 reviews while the KCP is down, has a change event or an overflow resync, with bounded memory", func(ctx SpecContext) {
		Expect(env.SetGatewayUp(ctx, false)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.SetGatewayUp(ctx, true)).To(Succeed()) })
		_, peakBefore, err := d.WebhookRSS()
		Expect(err).NotTo(HaveOccurred())

		overflowsBefore := webhookCounter(ctx, "runtime_watcher_skr_webhook_resyncs_requested_total", map[string]string{"reason": "overflow"})
		droppedBefore := webhookCounter(ctx, "runtime_watcher_skr_webhook_events_dropped_total", map[string]string{"reason": "overflow"})
		start := time.Now()
		const reviews, workers = 50000, 32
		var next, failed atomic.Int64
		var firstFailure atomic.Value // the first failure's description, for the report
		var wg sync.WaitGroup
		c := d.WebhookClient()
		url := d.WebhookURL() + contract.ValidatePath(n.Manager)
		for range workers {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for {
					i := next.Add(1) - 1
					if i >= reviews {
						return
					}
					resp, err := c.Post(url, "application/json", bytes.NewReader(admissionReview(n, fmt.Sprintf("flood-%d", i))))
					if err != nil {
						failed.Add(1)
						firstFailure.CompareAndSwap(nil, fmt.Sprintf("review %d at %s: %v", i, time.Since(start).Round(time.Millisecond), err))
						continue
					}
					body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
					_, _ = io.Copy(io.Discard, resp.Body)
					_ = resp.Body.Close()
					if resp.StatusCode != http.StatusOK {
						failed.Add(1)
						firstFailure.CompareAndSwap(nil, fmt.Sprintf("review %d at %s: %s %q", i, time.Since(start).Round(time.Millisecond), resp.Status, body))
					}
				}
			}()
		}
		wg.Wait()
		floodTime := time.Since(start)
		rss, peak, err := d.WebhookRSS()
		Expect(err).NotTo(HaveOccurred())
		AddReportEntry("flood", fmt.Sprintf("%d reviews in %s (%d not answered 200); webhook RSS %d MiB, peak %d MiB (before: peak %d MiB)",
			reviews, floodTime.Round(time.Millisecond), failed.Load(), rss>>20, peak>>20, peakBefore>>20))
		Expect(failed.Load()).To(BeZero(), "admission must be answered at once, whatever the KCP does; first failure: %v", firstFailure.Load())
		Expect(peak).To(BeNumerically("<", 128<<20), "the webhook's peak RSS went over its container limit (128 MiB)")

		// What the flood cost, from the webhook's own counters: changes
		// pushed out of the full queue, and the overflow resyncs asked
		// for them (and for reviews answered unread).
		overflows := webhookCounter(ctx, "runtime_watcher_skr_webhook_resyncs_requested_total", map[string]string{"reason": "overflow"}) - overflowsBefore
		dropped := webhookCounter(ctx, "runtime_watcher_skr_webhook_events_dropped_total", map[string]string{"reason": "overflow"}) - droppedBefore
		AddReportEntry("flood cost", fmt.Sprintf("%.0f changes dropped from the full queue, %.0f overflow resyncs requested", dropped, overflows))
		if dropped > 0 {
			Expect(overflows).To(BeNumerically(">", 0), "changes were dropped for overflow but no overflow resync was requested")
		}

		Expect(env.SetGatewayUp(ctx, true)).To(Succeed())
		if overflows > 0 {
			// A change was dropped or not read: the operator must be
			// told, by the resync itself (flood events alone do not say
			// which changes are missing).
			Eventually(func() int {
				return len(resyncs(n.RuntimeID, string(contract.ResyncOverflow), start))
			}).WithTimeout(3*time.Minute).Should(BeNumerically(">", 0), "%.0f overflow resyncs requested, none reached the operator", overflows)
		}
		Eventually(func() bool {
			return len(resyncs(n.RuntimeID, string(contract.ResyncOverflow), start)) > 0 || floodEvents(start) > 0
		}).WithTimeout(3*time.Minute).Should(BeTrue(), "neither a change event nor an overflow resync after the flood")
		AddReportEntry("after recovery", fmt.Sprintf("%d flood events, %d overflow resyncs so far",
			floodEvents(start), len(resyncs(n.RuntimeID, string(contract.ResyncOverflow), start))))
	})

	It("(d) records heartbeats; when the edge denies the runtime, its last-seen stops advancing and the metric shows it", func(ctx SpecContext) {
		lastSeen := func() float64 {
			best := 0.0
			for _, op := range d.Operators() {
				if v, ok := promtext.Sum(fetchMetrics(ctx, op.MetricsURL), "runtime_watcher_listener_last_seen_timestamp_seconds",
					map[string]string{"manager": n.Manager, "runtime_id": n.RuntimeID}); ok && v > best {
					best = v
				}
			}
			return best
		}
		By("heartbeats advance last-seen without any SKR change")
		first := lastSeen()
		Eventually(lastSeen).WithTimeout(30 * time.Second).Should(BeNumerically(">", first))
		beat := lastSeen()
		Eventually(lastSeen).WithTimeout(30 * time.Second).Should(BeNumerically(">", beat))

		By("removing the Kyma's skr-domain in the KCP, so ext-authz denies the runtime")
		kyma := &metav1.PartialObjectMetadata{}
		kyma.SetGroupVersionKind(v1beta2.KymaGroupVersionKind)
		key := client.ObjectKey{Namespace: n.KymaNamespace, Name: n.RuntimeID}
		Expect(env.KCP().Get(ctx, key, kyma)).To(Succeed())
		domain := kyma.GetAnnotations()[contract.AnnotationSKRDomain]
		Expect(domain).NotTo(BeEmpty())
		setDomain := func(ctx context.Context, v string) error {
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%s}}}`, contract.AnnotationSKRDomain, map[bool]string{true: "null", false: strconv.Quote(v)}[v == ""])
			return env.KCP().Patch(ctx, kyma, client.RawPatch("application/merge-patch+json", []byte(patch)))
		}
		Expect(setDomain(ctx, "")).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(setDomain(ctx, domain)).To(Succeed()) })

		// The metric shows a silent path: time() - last_seen grows past
		// several heartbeat intervals, and last-seen stays put.
		Eventually(func() float64 { return float64(time.Now().UnixNano())/1e9 - lastSeen() }).WithTimeout(time.Minute).
			Should(BeNumerically(">", 5), "last-seen still advances although the edge denies the runtime")
		frozen := lastSeen()
		Consistently(lastSeen).WithTimeout(3 * time.Second).Should(Equal(frozen))
		AddReportEntry("silent path", fmt.Sprintf("last-seen frozen at %s", time.Unix(int64(frozen), 0).UTC().Format(time.RFC3339)))

		By("restoring the skr-domain, last-seen advances again")
		Expect(setDomain(ctx, domain)).To(Succeed())
		Eventually(lastSeen).WithTimeout(time.Minute).Should(BeNumerically(">", frozen))
	})
})

// resyncs returns the resync events with reason for runtimeID received at
// or after since.
func resyncs(runtimeID, reason string, since time.Time) []e2e.Event {
	received.mu.Lock()
	defer received.mu.Unlock()
	var out []e2e.Event
	for _, ev := range received.events {
		if ev.Resync == reason && ev.RuntimeID == runtimeID && !ev.Time.Before(since) {
			out = append(out, ev)
		}
	}
	return out
}

// floodEvents counts events for flood-* objects received at or after since.
func floodEvents(since time.Time) int {
	received.mu.Lock()
	defer received.mu.Unlock()
	n := 0
	for _, ev := range received.events {
		if strings.HasPrefix(ev.Name, "flood-") && !ev.Time.Before(since) {
			n++
		}
	}
	return n
}

// admissionReview is the AdmissionReview the SKR API server sends for the
// creation of a watched Kyma named name.
func admissionReview(n sample, name string) []byte {
	return fmt.Appendf(nil, `{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","request":{"uid":"uid-%[1]s",`+
		`"kind":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"},`+
		`"resource":{"group":"operator.kyma-project.io","version":"v1beta2","resource":"kymas"},`+
		`"name":%[1]q,"namespace":%[2]q,"operation":"CREATE","userInfo":{"username":"e2e"},`+
		`"object":{"apiVersion":"operator.kyma-project.io/v1beta2","kind":"Kyma","metadata":{"name":%[1]q,"namespace":%[2]q,"labels":{%[3]q:%[4]q}},"spec":{"data":"flood"}}}}`,
		name, n.SKRNamespace, n.WatchedLabel, n.Manager)
}

func httpStatus(url string) int {
	resp, err := http.Get(url) //nolint:gosec,noctx // a test URL
	if err != nil {
		return 0
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// webhookCounter sums a counter over every skr-webhook process.
func webhookCounter(ctx context.Context, name string, labels map[string]string) float64 {
	text, err := env.WebhookMetrics(ctx)
	Expect(err).NotTo(HaveOccurred())
	v, _ := promtext.Sum(text, name, labels)
	return v
}
