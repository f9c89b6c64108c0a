package integration

import (
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/kcpstub"
	"github.com/seed-c8be168e/runtime-watcher/test/pki"
)

func count(name string) func() int {
	return func() int { return stub.Count(manager, eventOf(name)) }
}

func admissions(result string) float64 {
	return webhook.metric("runtime_watcher_skr_webhook_admission_requests_total", "manager", manager, "result", result)
}

func patchSpec(ctx SpecContext, name string, value any) error {
	u := kyma(name)
	patch := []byte(fmt.Sprintf(`{"spec":{"value":%q}}`, fmt.Sprint(value)))
	return skr.Patch(ctx, u, client.RawPatch(types.MergePatchType, patch))
}

func resourceVersion(ctx SpecContext, name string) string {
	u := kyma(name)
	Expect(skr.Get(ctx, client.ObjectKeyFromObject(u), u)).To(Succeed())
	return u.GetResourceVersion()
}

// observedFinal: some delivery of the object was answered after the object
// reached resourceVersion rv (the stub read it back as a KCP operator would).
func observedFinal(name, rv string) func() bool {
	return func() bool {
		for _, d := range stub.DeliveriesOf(manager, eventOf(name)) {
			if d.Observed == rv {
				return true
			}
		}
		return false
	}
}

var _ = Describe("skr-webhook behind a real SKR API server", Ordered, func() {
	It("emits on create, spec change, status change and delete; not on metadata-only changes or dry-run", func(ctx SpecContext) {
		Expect(skr.Create(ctx, kyma("rules"))).To(Succeed())
		Eventually(count("rules")).Should(Equal(1))

		emitted, unchanged, dryRun := admissions("emitted"), admissions("unchanged"), admissions("dry_run")
		u := kyma("rules")
		Expect(skr.Patch(ctx, u, client.RawPatch(types.MergePatchType,
			[]byte(`{"metadata":{"labels":{"team":"a"},"annotations":{"note":"x"}}}`)))).To(Succeed())
		Eventually(func() float64 { return admissions("unchanged") }).Should(Equal(unchanged + 1))

		Expect(skr.Create(ctx, kyma("dry"), client.DryRunAll)).To(Succeed())
		Expect(skr.Patch(ctx, kyma("rules"), client.RawPatch(types.MergePatchType, []byte(`{"spec":{"value":"dry"}}`)),
			client.DryRunAll)).To(Succeed())
		Eventually(func() float64 { return admissions("dry_run") }).Should(Equal(dryRun + 2))
		Expect(admissions("emitted")).To(Equal(emitted), "metadata-only and dry-run writes emitted")

		Expect(patchSpec(ctx, "rules", "changed")).To(Succeed())
		Eventually(count("rules")).Should(Equal(2))

		s := kyma("rules")
		Expect(skr.Get(ctx, client.ObjectKeyFromObject(s), s)).To(Succeed())
		Expect(unstructured.SetNestedField(s.Object, "Ready", "status", "state")).To(Succeed())
		Expect(skr.Status().Update(ctx, s)).To(Succeed())
		Eventually(func() int { return stub.Count(statusManager, eventOf("rules")) }).Should(Equal(1))

		Expect(skr.Delete(ctx, kyma("rules"))).To(Succeed())
		Eventually(count("rules")).Should(Equal(3))
		Expect(count("dry")()).To(Equal(0))
		Expect(count("rules")()).To(Equal(3), "the status update reached the spec watcher")
	}, SpecTimeout(2*time.Minute))

	outage := func(ctx SpecContext, mode kcpstub.Mode, prefix string) {
		names := make([]string, 10)
		for i := range names {
			names[i] = fmt.Sprintf("%s-%d", prefix, i)
			Expect(skr.Create(ctx, kyma(names[i]))).To(Succeed())
		}
		for _, n := range names {
			Eventually(count(n)).Should(Equal(1))
		}
		emitted := admissions("emitted")
		retries := webhook.metric("runtime_watcher_skr_webhook_event_retries_total")

		Expect(stub.SetMode(mode)).To(Succeed())
		var slowest time.Duration
		for round := 0; round < 3; round++ {
			for _, n := range names {
				start := time.Now()
				Expect(patchSpec(ctx, n, round)).To(Succeed())
				slowest = max(slowest, time.Since(start))
			}
		}
		fmt.Fprintf(GinkgoWriter, "KCP %s: slowest of 30 writes %v\n", prefix, slowest)
		// A webhook that waited for the KCP would hold writes for its
		// request timeout.
		Expect(slowest).To(BeNumerically("<", requestTimeout/2))
		Expect(admissions("emitted")).To(BeNumerically(">=", emitted+30), "the API server did not call the webhook")
		Eventually(func() float64 { return webhook.metric("runtime_watcher_skr_webhook_event_retries_total") }).
			Should(BeNumerically(">", retries), "deliveries did not fail while the KCP was down")

		final := map[string]string{}
		for _, n := range names {
			final[n] = resourceVersion(ctx, n)
		}
		back := time.Now()
		Expect(stub.SetMode(kcpstub.Serving)).To(Succeed())
		for _, n := range names {
			Eventually(observedFinal(n, final[n])).Should(BeTrue(), "final state of %s not delivered", n)
		}
		if mode == kcpstub.Refusing { // nothing can have reached the KCP meanwhile
			for _, n := range names {
				after := 0
				for _, d := range stub.DeliveriesOf(manager, eventOf(n)) {
					if d.At.After(back) {
						after++
					}
				}
				Expect(after).To(Equal(1), "%s delivered %d times after the outage", n, after)
			}
		}
	}

	It("keeps writes fast while the KCP refuses connections, and delivers every final state once it is back", func(ctx SpecContext) {
		outage(ctx, kcpstub.Refusing, "refused")
	}, SpecTimeout(3*time.Minute))

	It("keeps writes fast while the KCP accepts TCP but never answers, and delivers every final state once it is back", func(ctx SpecContext) {
		outage(ctx, kcpstub.Blackholed, "blackholed")
	}, SpecTimeout(3*time.Minute))

	It("serves and sends the rotated certificate without a restart and without failed deliveries", func(ctx SpecContext) {
		Expect(skr.Create(ctx, kyma("rotation"))).To(Succeed())
		Eventually(count("rotation")).Should(Equal(1))
		retries := webhook.metric("runtime_watcher_skr_webhook_event_retries_total")
		dropped := webhook.metric("runtime_watcher_skr_webhook_events_dropped_total")
		handshakeErrors := stub.HandshakeErrors()
		oldSerial := stub.DeliveriesOf(manager, eventOf("rotation"))[0].Serial

		rotated, err := skrCA.Issue(pki.LeafOptions{CommonName: "runtime-1", DNSNames: []string{"skr.example.com"},
			IPs: webhookIPs()})
		Expect(err).NotTo(HaveOccurred())
		newSerial := rotated.Cert.SerialNumber.String()
		Expect(newSerial).NotTo(Equal(oldSerial))
		Expect(writeAtomically(certDir, rotated)).To(Succeed())

		Eventually(func() string { return servingSerial(webhook.listenAddr, skrCA) }).Should(Equal(newSerial))
		n := 0
		Eventually(func() string {
			n++
			Expect(patchSpec(ctx, "rotation", n)).To(Succeed())
			ds := stub.DeliveriesOf(manager, eventOf("rotation"))
			return ds[len(ds)-1].Serial
		}).WithPolling(1500 * time.Millisecond).Should(Equal(newSerial))

		since := time.Now()
		var names []string
		for i := 0; i < 10; i++ {
			names = append(names, fmt.Sprintf("rotated-%d", i))
			Expect(skr.Create(ctx, kyma(names[i]))).To(Succeed())
		}
		for _, name := range names {
			Eventually(count(name)).Should(Equal(1))
		}
		for _, d := range stub.Deliveries() {
			if d.At.After(since) {
				Expect(d.Serial).To(Equal(newSerial), "delivery of %s after the rotation", d.Event.Watched.Name)
			}
		}
		Expect(webhook.metric("runtime_watcher_skr_webhook_event_retries_total")).To(Equal(retries), "deliveries failed around the rotation")
		Expect(webhook.metric("runtime_watcher_skr_webhook_events_dropped_total")).To(Equal(dropped))
		Expect(stub.HandshakeErrors()).To(Equal(handshakeErrors))
	}, SpecTimeout(3*time.Minute))

	It("collapses 1,000 updates of one object into a handful of deliveries, the last after the final write", func(ctx SpecContext) {
		Expect(skr.Create(ctx, kyma("burst"))).To(Succeed())
		Eventually(count("burst")).Should(Equal(1))
		emitted := admissions("emitted")
		coalesced := webhook.metric("runtime_watcher_skr_webhook_events_coalesced_total")

		start := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, 1000)
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer GinkgoRecover()
				for i := w; i < 1000; i += 4 {
					errs <- patchSpec(ctx, "burst", i)
				}
			}()
		}
		wg.Wait()
		elapsed := time.Since(start)
		close(errs)
		for err := range errs {
			Expect(err).NotTo(HaveOccurred())
		}
		final := resourceVersion(ctx, "burst")
		Eventually(func() string {
			ds := stub.DeliveriesOf(manager, eventOf("burst"))
			return ds[len(ds)-1].Observed
		}).Should(Equal(final), "the last delivery came before the final write")

		deliveries := count("burst")() - 1
		fmt.Fprintf(GinkgoWriter, "1,000 updates in %v → %d deliveries\n", elapsed, deliveries)
		Expect(admissions("emitted") - emitted).To(BeNumerically(">=", 1000))
		Expect(webhook.metric("runtime_watcher_skr_webhook_events_coalesced_total") - coalesced).To(BeNumerically(">=", 1000-deliveries))
		// One delivery per --object-interval at most, plus the first and the last.
		Expect(deliveries).To(BeNumerically("<=", int(elapsed/objectInterval)+2))
	}, SpecTimeout(5*time.Minute))

	It("on SIGTERM stops, delivers what is pending within the drain time and exits 0", func(ctx SpecContext) {
		Expect(stub.SetMode(kcpstub.Refusing)).To(Succeed())
		retries := webhook.metric("runtime_watcher_skr_webhook_event_retries_total")
		var names []string
		for i := 0; i < 5; i++ {
			names = append(names, fmt.Sprintf("drain-%d", i))
			Expect(skr.Create(ctx, kyma(names[i]))).To(Succeed())
		}
		Eventually(func() float64 { return webhook.metric("runtime_watcher_skr_webhook_event_retries_total") }).
			Should(BeNumerically(">=", retries+5))
		webhook.terminate()
		Eventually(func() int { return webhook.get("/readyz") }).ShouldNot(Equal(200))
		Expect(stub.SetMode(kcpstub.Serving)).To(Succeed())
		Eventually(webhook.exited).WithTimeout(20 * time.Second).Should(BeClosed())
		Expect(webhook.err).NotTo(HaveOccurred(), "exit status")
		for _, n := range names {
			Expect(count(n)()).To(Equal(1), "%s not delivered during the drain", n)
		}
	}, SpecTimeout(2*time.Minute))
})
