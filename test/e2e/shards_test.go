package e2e_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	certmanagerv1 "github.com/cert-manager/cert-manager/pkg/apis/certmanager/v1"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/certificates"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/trust"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/vsmanager"
)

// inOrder is d in milliseconds, one decimal.
func inOrder(d []time.Duration) []float64 {
	out := make([]float64, len(d))
	for i, x := range d {
		out[i] = float64(x.Microseconds()/100) / 10
	}
	return out
}

// skrWebhooks are the names of the webhooks of the SKR's
// ValidatingWebhookConfiguration skr-webhook.
func skrWebhooks(ctx context.Context) ([]string, error) {
	var vwc admissionregistrationv1.ValidatingWebhookConfiguration
	if err := env.SKR().Get(ctx, client.ObjectKey{Name: bundle.Name}, &vwc); err != nil {
		return nil, err
	}
	var names []string
	for _, wh := range vwc.Webhooks {
		names = append(names, wh.Name)
	}
	return names, nil
}

// memberViews: the live member Leases of group (renewed within lease), by
// holder, with their published views.
func memberViews(ctx context.Context, group string, lease time.Duration) (map[string]string, error) {
	list := &coordinationv1.LeaseList{}
	if err := env.KCP().List(ctx, list, client.InNamespace(env.Names().KymaNamespace), client.MatchingLabels{shards.LabelGroup: group}); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, l := range list.Items {
		if h := l.Spec.HolderIdentity; h != nil && *h != "" && l.Spec.RenewTime != nil && time.Since(l.Spec.RenewTime.Time) < lease {
			out[*h] = l.Annotations[shards.AnnotationView]
		}
	}
	return out, nil
}

// Shards (ARCHITECTURE.md §3.13, docs/operations.md "Scaling"): module-sync
// as 3 replicas that share the runtimes. A Module CR edit's event lands on
// any replica through the real gateway (Envoy); the replicas that do not
// own the runtime answer 503 and the gateway retries on another, so the
// edit reaches the owner's mirror and comes back to the SKR as before.
// When the owner is SIGKILLed the runtime moves once its Lease expired;
// a replica added or stopped moves at most the share it must. Ownership is
// read from the KCP's Leases (the members' published views), never from
// our logs.
var _ = Describe("shards", Label("shards"), Ordered, func() {
	const lease = 15 * time.Second
	var (
		sh      e2e.ShardsEnvironment
		members *localenv.Replicas
		// vsMembers: 3 vs-controller replicas alongside module-sync's.
		vsMembers *localenv.Replicas
		obs       <-chan localenv.Observation
		edits     int
		baseline  []time.Duration
		// toKCP: the first leg of each edit (to the ModuleConfig), in order.
		toKCP, toKCPBaseline []time.Duration
	)
	runtime := func() string { return env.Names().KymaNamespace + "/" + env.Names().RuntimeID }

	views := func(ctx context.Context, group string) (map[string]string, error) {
		return memberViews(ctx, group, lease)
	}
	// settledOn: every replica of group in want is live and publishes the
	// view of exactly want; it returns the runtime's owner.
	settledOn := func(ctx context.Context, group string, want []string) string {
		want = slices.Sorted(slices.Values(want))
		Eventually(func(g Gomega) {
			v, err := views(ctx, group)
			g.Expect(err).NotTo(HaveOccurred())
			for _, id := range want {
				g.Expect(v).To(HaveKeyWithValue(id, strings.Join(want, ",")))
			}
		}).WithTimeout(30*time.Second).Should(Succeed(), "the %s members' Leases do not all publish the view %v", group, want)
		return shards.Owner(runtime(), want)
	}
	// settled: module-sync's running replicas.
	settled := func(ctx context.Context) string {
		var want []string
		for _, r := range members.Replicas() {
			want = append(want, r.Identity)
		}
		return settledOn(ctx, syncmanager.ShardGroup, want)
	}
	// vsSettled: vs-controller's running replicas.
	vsSettled := func(ctx context.Context) string {
		var want []string
		for _, r := range vsMembers.Replicas() {
			want = append(want, r.Identity)
		}
		return settledOn(ctx, vsmanager.ShardGroup, want)
	}
	// edit changes the Module CR and returns how long until the SKR object
	// holds the change.
	edit := func(ctx context.Context, within time.Duration) time.Duration {
		edits++
		greeting := fmt.Sprintf("shards-%d", edits)
		at, err := sh.SetSampleGreeting(ctx, greeting, int64(edits%3+1))
		Expect(err).NotTo(HaveOccurred())
		timeout := time.After(within)
		leg := "it did not reach the ModuleConfig either"
		for {
			select {
			case o := <-obs:
				if o.Greeting != greeting {
					continue
				}
				if o.Where == "kcp" {
					toKCP = append(toKCP, o.Time.Sub(at)) // the first leg: SKR → gateway → owner's mirror → ModuleConfig
					leg = fmt.Sprintf("it reached the ModuleConfig after %s", o.Time.Sub(at))
					continue
				}
				GinkgoWriter.Printf("edit %s: written at %s, %s, the SKR object after %s\n", greeting, at.UTC().Format("15:04:05.000000"), leg, o.Time.Sub(at))
				return o.Time.Sub(at)
			case <-timeout:
				Fail(fmt.Sprintf("edit %s did not reach the SKR object within %s (%s)", greeting, within, leg))
			}
		}
	}
	// roundTrips makes n edits, each 1.1 s after the previous one came
	// back, and returns their round trips, sorted. The skr-webhook starts
	// the deliveries of one object at least 1 s apart (--object-interval):
	// paced from the previous edit's start instead, an edit whose event
	// went out late (e.g. delivered again by the webhook) held the next
	// edits' events back by 100 ms less each — 600, 500, … ms (issue 36:
	// the p99 and p90 of the sharded round trip at 0208066, 599.4 and
	// 199.4 ms), the webhook's rate limit, not the round trip.
	roundTrips := func(ctx context.Context, n int) []time.Duration {
		var rt []time.Duration
		last := time.Now()
		for range n {
			time.Sleep(time.Until(last.Add(1100 * time.Millisecond))) // pacing, not a wait for a result
			rt = append(rt, edit(ctx, 30*time.Second))
			last = time.Now()
		}
		slices.Sort(rt)
		return rt
	}
	// stages: a module-sync process's own account of the events' way to
	// the ModuleConfig (syncmetrics.EventLatency: events by the time their
	// mirror pass began and ended, cumulative buckets) and of its passes
	// that waited or failed.
	stages := func(ctx context.Context, url string) map[string]float64 {
		text, err := promtext.Fetch(ctx, url)
		Expect(err).NotTo(HaveOccurred())
		out := map[string]float64{}
		for _, stage := range []string{"queued", "mirrored"} {
			for _, le := range []string{"0.01", "0.025", "0.05", "0.1", "0.25", "0.5", "+Inf"} {
				out[stage+" ≤"+le+"s"], _ = promtext.Sum(text, "runtime_watcher_module_sync_event_latency_seconds_bucket", map[string]string{"stage": stage, "le": le})
			}
		}
		for _, le := range []string{"0.01", "0.025", "0.05", "0.1", "0.25", "+Inf"} {
			out["SKR GET/LIST ≤"+le+"s"], _ = promtext.Sum(text, "runtime_watcher_module_sync_skr_request_duration_seconds_bucket", map[string]string{"method": "GET", "le": le})
		}
		for _, result := range []string{"runtime-busy", "failed", "synced", "unchanged"} {
			out["mirror "+result], _ = promtext.Sum(text, "runtime_watcher_module_sync_mirror_passes_total", map[string]string{"result": result})
		}
		out["syncresource runtime-busy"], _ = promtext.Sum(text, "runtime_watcher_module_sync_syncresource_reconciles_total", map[string]string{"result": "runtime-busy"})
		return out
	}
	stagesDelta := func(before, after map[string]float64) string {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(after)) {
			parts = append(parts, fmt.Sprintf("%s %.0f", k, after[k]-before[k]))
		}
		return strings.Join(parts, ", ")
	}
	notOwnerRefused := func(ctx context.Context) float64 {
		sum := 0.0
		for _, r := range members.Replicas() {
			text, err := promtext.Fetch(ctx, r.MetricsURL)
			Expect(err).NotTo(HaveOccurred())
			n, _ := promtext.Sum(text, "runtime_watcher_listener_not_owner_refused_total", nil)
			sum += n
		}
		return sum
	}

	BeforeAll(func(ctx SpecContext) {
		var ok bool
		if sh, ok = env.(e2e.ShardsEnvironment); !ok {
			Fail("the " + envName() + " environment cannot run module-sync as shards: leave out the shards label there")
		}
		watchCtx, cancel := context.WithCancel(context.Background())
		DeferCleanup(cancel)
		var err error
		obs, err = sh.WatchModuleLoop(watchCtx)
		Expect(err).NotTo(HaveOccurred())
		// The twin row: the same edits with the one module-sync process
		// (no shards), in the same run on the same machine.
		edit(ctx, time.Minute)
		toKCP = nil
		var twinStages map[string]float64
		if ms, ok := env.(e2e.ModuleSyncEnvironment); ok {
			twinStages = stages(ctx, ms.ModuleSyncMetricsURL())
		}
		baseline = roundTrips(ctx, 40)
		GinkgoWriter.Printf("one module-sync, first leg per edit in order (ms): %v\n", inOrder(toKCP))
		if ms, ok := env.(e2e.ModuleSyncEnvironment); ok {
			AddReportEntry("one module-sync's stages during its 40 edits (events by the time from the listener to their mirror pass's start and end)", stagesDelta(twinStages, stages(ctx, ms.ModuleSyncMetricsURL())))
		}
		toKCPBaseline = slices.Clone(toKCP)
		slices.Sort(toKCPBaseline)
		members, err = sh.ShardModuleSync(ctx, 3, lease)
		DeferCleanup(func(ctx SpecContext) {
			Expect(members.Restore(ctx)).To(Succeed())
		}, NodeTimeout(2*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		settled(ctx)
		vsMembers, err = sh.ShardVSController(ctx, 3, lease)
		DeferCleanup(func(ctx SpecContext) {
			Expect(vsMembers.Restore(ctx)).To(Succeed())
		}, NodeTimeout(2*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		vsSettled(ctx)
		// The first edit also waits for istiod to have pushed the three
		// endpoints.
		edit(ctx, time.Minute)
	}, NodeTimeout(5*time.Minute))

	// The round trip is measured beside its twin (the same edits with one
	// module-sync in the same run) and asserted against it: the sharded
	// p50 within 2x the twin's + 20 ms (sharding may cost a gateway retry
	// on a replica that does not own the runtime, not a second trip). The
	// p90 and p99 are reported, not asserted: under load some sharded
	// events still spend up to ~160 ms inside Envoy (docs/performance.md,
	// "What remains"), 6 of 40 in one run, and of 40 edits the p99 is the
	// slowest one. Asserted too: every event reaches the owner within the
	// gateway's retries. The
	// stages (module-sync's event_latency_seconds of the twin and the owner)
	// say where an edit's time went; with -ginkgo.v every edit's times are
	// printed.
	It("delivers every Module CR edit to the runtime's owner through the gateway", func(ctx SpecContext) {
		owner := settled(ctx)
		refusedBefore := notOwnerRefused(ctx)
		webhookRetries := func() float64 {
			text, err := env.WebhookMetrics(ctx)
			Expect(err).NotTo(HaveOccurred())
			n, _ := promtext.Sum(text, "runtime_watcher_skr_webhook_event_retries_total", nil)
			return n
		}
		// Envoy's own account of the module-sync cluster: requests, retries
		// and their backoffs, 503s.
		envoyStats := func() map[string]uint64 {
			out := map[string]uint64{}
			ie, ok := env.(e2e.IstioEnvironment)
			if !ok {
				return out
			}
			st, err := ie.Istio().GatewayAdmin().Stats(ctx, "module-sync")
			Expect(err).NotTo(HaveOccurred())
			for _, k := range []string{".upstream_rq_total", ".upstream_rq_retry", ".upstream_rq_retry_success", ".upstream_rq_retry_overflow",
				".upstream_rq_retry_backoff_exponential", ".upstream_rq_retry_limit_exceeded", ".upstream_rq_503", ".upstream_cx_total", ".upstream_cx_destroy_remote_with_active_rq"} {
				out[k] = st.Sum(k)
			}
			return out
		}
		ownerURL := ""
		for _, r := range members.Replicas() {
			if r.Identity == owner {
				ownerURL = r.MetricsURL
			}
		}
		// The webhook's own account of its deliveries: how long each change
		// waited until it was delivered (held back by the per-object
		// interval, or by retries), cumulative buckets.
		webhookLatency := func() map[string]float64 {
			text, err := env.WebhookMetrics(ctx)
			Expect(err).NotTo(HaveOccurred())
			out := map[string]float64{}
			for _, le := range []string{"0.025", "0.05", "0.1", "0.25", "0.5", "1", "+Inf"} {
				out["≤"+le+"s"], _ = promtext.Sum(text, "runtime_watcher_skr_webhook_delivery_latency_seconds_bucket", map[string]string{"le": le})
			}
			return out
		}
		// The last edit before (BeforeAll's) came right after the membership
		// changed: its event may wait in the webhook for a second delivery,
		// and every later change of the object then for the per-object
		// interval after it. The measured edits begin when the webhook owes
		// nothing (and roundTrips waits 1.1 s before the first).
		Eventually(func(g Gomega) {
			text, err := env.WebhookMetrics(ctx)
			g.Expect(err).NotTo(HaveOccurred())
			depth, _ := promtext.Sum(text, "runtime_watcher_skr_webhook_queue_depth", nil)
			g.Expect(depth).To(BeZero())
		}).WithTimeout(30*time.Second).WithPolling(50*time.Millisecond).Should(Succeed(), "the webhook still owes deliveries")
		ownerBefore := stages(ctx, ownerURL)
		envoyBefore := envoyStats()
		retriesBefore := webhookRetries()
		latencyBefore := webhookLatency()
		toKCP = nil
		rt := roundTrips(ctx, 40)
		AddReportEntry("the webhook's delivery latency during the 40 sharded edits (changes by the time until delivered)", stagesDelta(latencyBefore, webhookLatency()))
		GinkgoWriter.Printf("3 shards, first leg per edit in order (ms): %v\n", inOrder(toKCP))
		// Attempts that came back to the webhook as failures (the gateway
		// did not reach the owner): each costs the webhook's retry backoff.
		retried := webhookRetries() - retriesBefore
		slices.Sort(toKCP)
		refused := notOwnerRefused(ctx) - refusedBefore
		ms := func(d []time.Duration, p float64) float64 { return loadgen.Millis(loadgen.Percentile(d, p)) }
		GinkgoWriter.Printf("round trip SKR → KCP → SKR, %d edits each: one module-sync p50 %.1f ms, p90 %.1f ms, p99 %.1f ms; 3 shards (owner %s) p50 %.1f ms, p90 %.1f ms, p99 %.1f ms; %v events answered 503 by a replica that does not own the runtime (retried by the gateway)\n",
			len(rt), ms(baseline, 0.5), ms(baseline, 0.9), ms(baseline, 0.99), owner, ms(rt, 0.5), ms(rt, 0.9), ms(rt, 0.99), refused)
		AddReportEntry("round trip ms (one module-sync p50/p90/p99 | 3 shards p50/p90/p99)", fmt.Sprintf("%.1f/%.1f/%.1f | %.1f/%.1f/%.1f",
			ms(baseline, 0.5), ms(baseline, 0.9), ms(baseline, 0.99), ms(rt, 0.5), ms(rt, 0.9), ms(rt, 0.99)))
		envoyAfter := envoyStats()
		var envoyDelta []string
		for _, k := range slices.Sorted(maps.Keys(envoyAfter)) {
			envoyDelta = append(envoyDelta, fmt.Sprintf("%s %d", strings.TrimPrefix(k, "."), envoyAfter[k]-envoyBefore[k]))
		}
		AddReportEntry("the gateway's module-sync cluster during the 40 sharded edits", strings.Join(envoyDelta, ", "))
		AddReportEntry("the owner's stages during the 40 sharded edits (events by the time from its listener to their mirror pass's start and end)", stagesDelta(ownerBefore, stages(ctx, ownerURL)))
		AddReportEntry("webhook retries during the 40 sharded edits (events the gateway did not bring to the owner)", retried)
		AddReportEntry("first leg SKR → ModuleConfig ms (one module-sync p50/p90/p99 | 3 shards p50/p90/p99)", fmt.Sprintf("%.1f/%.1f/%.1f | %.1f/%.1f/%.1f",
			ms(toKCPBaseline, 0.5), ms(toKCPBaseline, 0.9), ms(toKCPBaseline, 0.99), ms(toKCP, 0.5), ms(toKCP, 0.9), ms(toKCP, 0.99)))
		Expect(ms(rt, 0.5)).To(BeNumerically("<=", 2*ms(baseline, 0.5)+20),
			"the sharded round trip's p50 (%.1f ms) beyond 2x the one-replica twin's (%.1f ms) + 20 ms", ms(rt, 0.5), ms(baseline, 0.5))
		Expect(refused).To(BeNumerically(">", 0), "no event landed on a replica that does not own the runtime: the 503 path was not exercised")
		// With the membership settled every event reaches the owner within
		// the gateway's retries: none is refused by every replica and sent
		// back to the webhook (a second later, and every following edit's
		// event held by the webhook's per-object interval).
		Expect(envoyAfter[".upstream_rq_retry_limit_exceeded"]-envoyBefore[".upstream_rq_retry_limit_exceeded"]).To(BeZero(), "an event was refused by every replica")
		Expect(settled(ctx)).To(Equal(owner), "the owner changed without a membership change")
	}, NodeTimeout(3*time.Minute))

	// As the manifests ship them, the vs-controller replicas serve health
	// reports, each on its own listener behind the gateway's health route;
	// only the leader evaluates, the others answer 421 and the webhook
	// tries again at once (vs-controller/health, skr-webhook/delivery).
	It("hands a health report that lands on a vs-controller replica not evaluating it to the one that does (421), across the replicas' processes", func(ctx SpecContext) {
		vsSettled(ctx)
		type counts struct{ accepted, misdirected float64 }
		read := func(g Gomega) map[string]counts {
			out := map[string]counts{}
			for _, r := range vsMembers.Replicas() {
				text, err := promtext.Fetch(ctx, r.MetricsURL)
				g.Expect(err).NotTo(HaveOccurred())
				var c counts
				c.accepted, _ = promtext.Sum(text, "runtime_watcher_vs_controller_health_reports_total", map[string]string{"result": "accepted"})
				c.misdirected, _ = promtext.Sum(text, "runtime_watcher_vs_controller_health_reports_total", map[string]string{"result": "not-evaluating"})
				out[r.Identity] = c
			}
			return out
		}
		before := read(Default)
		// A report every skr-webhook --health-interval (30 s); each lands on
		// a replica the gateway picks: within 5 min one was answered 421
		// with near certainty, and every report reached the evaluator.
		var took time.Duration
		start := time.Now()
		Eventually(func(g Gomega) {
			now := read(g)
			var misdirected float64
			var acceptedBy []string
			for id, c := range now {
				misdirected += c.misdirected - before[id].misdirected
				if c.accepted > before[id].accepted {
					acceptedBy = append(acceptedBy, id)
				}
			}
			g.Expect(acceptedBy).To(HaveLen(1), "reports accepted by %v: one replica (the leader) evaluates", acceptedBy)
			g.Expect(misdirected).To(BeNumerically(">", 0), "no report landed on a replica that does not evaluate: the 421 path was not exercised")
			took = time.Since(start)
		}).WithContext(ctx).WithTimeout(5 * time.Minute).WithPolling(time.Second).Should(Succeed())
		AddReportEntry("a report answered 421 by a non-evaluating vs-controller replica and one accepted by the evaluator after", took.Round(time.Second).String())
	}, NodeTimeout(6*time.Minute))

	It("moves the runtime within 30 s when its owner is SIGKILLed, and the next edit reaches the new owner", func(ctx SpecContext) {
		owner := settled(ctx)
		Expect(members.Kill(ctx, owner)).To(Succeed())
		began := time.Now()
		took := edit(ctx, 45*time.Second)
		next := settled(ctx)
		moved := time.Since(began)
		GinkgoWriter.Printf("owner %s SIGKILLed: the edit reached the SKR after %s; views settled without it after %s; new owner %s\n", owner, took, moved, next)
		Expect(next).NotTo(Equal(owner))
		Expect(took).To(BeNumerically("<", 30*time.Second), "a killed owner's runtime re-owned and its edit delivered")
	}, NodeTimeout(2*time.Minute))

	// vs-controller's runtime work (the Certificate, the SKR bundle)
	// moves with its owner: a new Watcher's webhook reaches the runtime's
	// SKR through the new owner (and, when the killed replica led, through
	// the new leader's VirtualService). What the SKR was given is on the
	// runtime's Certificate (trust.AnnotationEvidence), whichever replica
	// pushed it.
	It("keeps the runtime's certificate and bundle converging when its vs-controller owner is SIGKILLed, and a Watcher change still reaches the SKR", func(ctx SpecContext) {
		n := env.Names()
		owner := vsSettled(ctx)
		crtKey := client.ObjectKey{Namespace: n.KymaNamespace, Name: certificates.Name(n.RuntimeID)}
		pushed := func(g Gomega) {
			crt := &certmanagerv1.Certificate{}
			g.Expect(env.KCP().Get(ctx, crtKey, crt)).To(Succeed())
			_, ok := trust.EvidenceOf(crt)
			g.Expect(ok).To(BeTrue(), "the runtime's Certificate carries no trust evidence")
			ready := false
			for _, c := range crt.Status.Conditions {
				ready = ready || (c.Type == certmanagerv1.CertificateConditionReady && c.Status == "True")
			}
			g.Expect(ready).To(BeTrue(), "the runtime's Certificate is not Ready")
			g.Expect(env.SKR().Get(ctx, client.ObjectKey{Namespace: n.SKRNamespace, Name: bundle.SecretName}, &corev1.Secret{})).To(Succeed())
		}
		Eventually(pushed).WithTimeout(30 * time.Second).Should(Succeed())
		Expect(vsMembers.Kill(ctx, owner)).To(Succeed())
		began := time.Now()
		probe := managerWatcher(sample(n), "shards-probe", v1beta2.Service{Name: "shards-probe", Namespace: n.KymaNamespace, Port: 8082})
		Expect(env.KCP().Create(ctx, probe)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, probe))).To(Succeed())
			Eventually(func() ([]string, error) { return skrWebhooks(ctx) }).WithTimeout(45 * time.Second).ShouldNot(ContainElement(probe.WebhookName()))
		}, NodeTimeout(time.Minute))
		Eventually(func() ([]string, error) { return skrWebhooks(ctx) }).WithTimeout(45*time.Second).WithPolling(100*time.Millisecond).
			Should(ContainElement(probe.WebhookName()), "the new Watcher's webhook did not reach the SKR after the owner was killed")
		took := time.Since(began)
		next := vsSettled(ctx)
		Eventually(pushed).WithTimeout(30 * time.Second).Should(Succeed())
		GinkgoWriter.Printf("vs-controller owner %s SIGKILLed: a new Watcher's webhook reached the SKR after %s; new owner %s\n", owner, took, next)
		AddReportEntry("vs-controller owner SIGKILLed: a new Watcher's webhook in the SKR after", took.String())
		Expect(next).NotTo(Equal(owner))
		Expect(took).To(BeNumerically("<", 45*time.Second))
	}, NodeTimeout(3*time.Minute))

	It("adds a replica and stops one: the runtime moves only to the new replica or from the stopped one, and every edit arrives", func(ctx SpecContext) {
		before := settled(ctx)
		added, err := members.Add(ctx)
		Expect(err).NotTo(HaveOccurred())
		after := settled(ctx)
		Expect(after).To(Or(Equal(before), Equal(added)), "a join moved the runtime to an old member")
		edit(ctx, 30*time.Second)
		var stop string
		for _, r := range members.Replicas() {
			if r.Identity != after {
				stop = r.Identity
				break
			}
		}
		Expect(members.Stop(ctx, stop)).To(Succeed())
		Expect(settled(ctx)).To(Equal(after), "stopping %s, which did not own the runtime, moved it", stop)
		edit(ctx, 30*time.Second)
	}, NodeTimeout(3*time.Minute))
})
