package health

// The no-false-alarm run of issue 35 at fleet size, on a fake clock: 10,000
// runtimes for 30 minutes of normal churn, and what health costs per
// runtime. What is real and what is simulated (docs/performance.md, "Watch-
// path health"):
//   - real: the report handler (each report a POST through Tracker.Handler:
//     identity header, bounded read, contract.ParseHealthReport), the
//     Tracker, the Evaluator's rounds every 10 s with their probe pool, the
//     defaults of every timing (30 s reports, 90 s silence, 90 s checks,
//     60 s delivery grace), and one in-memory SKR per runtime (test/memskr)
//     holding its webhook configuration, which the probe reads;
//   - simulated: the webhooks (a report per runtime every 30 s, each at its
//     own phase, through the handler in process: no TLS, gateway or
//     ext-authz), their restarts (the gap a restart leaves in its reports),
//     certificate renewals and a CA rotation (what they do to the SKR: the
//     Secret and the webhook configuration rewritten; a renewal or a new
//     ca.crt does not pause the reports, the webhook reloads both without a
//     restart), a vs-controller restart (a new Tracker and Evaluator: all
//     in memory is lost); the probe (memProber) reads what the real one
//     reads in the steady state (the webhook configuration's metadata)
//     but judges only its presence, not vs-controller's desired content.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	goruntime "runtime"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skrclient"
	"github.com/seed-c8be168e/runtime-watcher/test/memskr"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

// memProber reads each runtime's webhook configuration from its memory SKR.
type memProber struct {
	fleet           *memskr.Fleet
	configs, silent atomic.Int64
}

func (p *memProber) Config(ctx context.Context, rt Runtime) (Finding, error) {
	p.configs.Add(1)
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
	switch err := p.fleet.Cluster(rt.ID).Get(ctx, client.ObjectKey{Name: bundle.Name}, m); {
	case apierrors.IsNotFound(err):
		return Finding{Cause: CauseWebhookConfigMissing}, nil
	case err != nil:
		return Finding{}, err
	}
	return Finding{}, nil
}

func (p *memProber) Silent(context.Context, Runtime) (Finding, error) {
	p.silent.Add(1)
	return Finding{Cause: CauseNothingHeard}, nil
}

// counting counts the flags raised.
type counting struct{ changes, flaggedMax int }

func (c *counting) Changed(context.Context, Runtime, Finding, Finding) { c.changes++ }
func (c *counting) Round(_ context.Context, flagged map[string]Finding) {
	c.flaggedMax = max(c.flaggedMax, len(flagged))
}

func fleetRuntimeID(i int) string { return fmt.Sprintf("runtime-%05d", i) }

// writeSKR (re)writes a runtime's webhook configuration and Secret in its
// memory SKR, as a bundle pass does.
func writeSKR(ctx context.Context, c client.Client, caBundle, cert string) error {
	vwc := &admissionregistrationv1.ValidatingWebhookConfiguration{ObjectMeta: metav1.ObjectMeta{Name: bundle.Name}}
	vwc.SetGroupVersionKind(bundle.ValidatingWebhookConfigurationGVK)
	none, ignore := admissionregistrationv1.SideEffectClassNoneOnDryRun, admissionregistrationv1.Ignore
	url := "https://localhost/validate/m"
	vwc.Webhooks = []admissionregistrationv1.ValidatingWebhook{{Name: "m.operator.kyma-project.io", SideEffects: &none, FailurePolicy: &ignore,
		AdmissionReviewVersions: []string{"v1"}, ClientConfig: admissionregistrationv1.WebhookClientConfig{URL: &url, CABundle: []byte(caBundle)}}}
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: bundle.DefaultNamespace, Name: bundle.SecretName},
		Data: map[string][]byte{corev1.TLSCertKey: []byte(cert)}}
	sec.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: bundle.DefaultNamespace}}
	ns.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Namespace"))
	for _, o := range []client.Object{ns, vwc, sec} {
		live := o.DeepCopyObject().(client.Object)
		switch err := c.Get(ctx, client.ObjectKeyFromObject(o), live); {
		case apierrors.IsNotFound(err):
			if err := c.Create(ctx, o); err != nil {
				return err
			}
		case err != nil:
			return err
		default:
			o.SetResourceVersion(live.GetResourceVersion())
			if err := c.Update(ctx, o); err != nil {
				return err
			}
		}
	}
	return nil
}

func TestNoFalseAlarmsAt10000RuntimesOver30MinutesOfChurn(t *testing.T) {
	if testing.Short() {
		t.Skip("10,000 runtimes for 30 simulated minutes: not in -short")
	}
	const (
		n        = 10000
		duration = 30 * time.Minute
		interval = 30 * time.Second // the webhooks' --health-interval default
	)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(35, 2026))
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 12, 0, 0, 0, time.UTC))
	fleet := memskr.NewFleet(bundle.Scheme(), skrclient.NewRESTMapper(bundle.Kinds()))
	rts := make([]Runtime, n)
	for i := range rts {
		id := fleetRuntimeID(i)
		rts[i] = Runtime{ID: id, Kyma: &metav1.PartialObjectMetadata{ObjectMeta: metav1.ObjectMeta{Name: id}}}
		if err := writeSKR(ctx, fleet.Cluster(id), "ca-1", "cert-1-"+id); err != nil {
			t.Fatal(err)
		}
	}
	prober := &memProber{fleet: fleet}
	rep := &counting{}
	var tracker *Tracker
	var ev *Evaluator
	start := func() { // a vs-controller (re)start: nothing in memory
		tracker = NewTracker(clk, MaxRuntimes)
		ev = NewEvaluator(Options{Clock: clk}, tracker, func(context.Context) ([]Runtime, error) { return rts, nil }, prober, rep, logr.Discard())
	}
	start()

	// The churn, per runtime: its report phase; one webhook restart (a
	// rolling update of the bundle) at a random time, leaving a gap of
	// 1-25 s, and a second one for a tenth of them; one certificate
	// renewal at a random time. A CA rotation rewrites every runtime's
	// webhook configuration (new caBundle) over minutes 10-20 and the
	// Secrets again (re-issued by the new CA); vs-controller restarts at
	// minute 15.
	type churn struct {
		phase           int
		down, up        [2]int // seconds: no reports in [down, up)
		renewal, caPush int
	}
	secs := int(duration / time.Second)
	plan := make([]churn, n)
	for i := range plan {
		p := &plan[i]
		p.phase = rng.IntN(int(interval / time.Second))
		for k := range 2 {
			p.down[k], p.up[k] = -1, -1
			if k == 0 || rng.IntN(10) == 0 {
				p.down[k] = rng.IntN(secs)
				p.up[k] = p.down[k] + 1 + rng.IntN(25)
			}
		}
		p.renewal = rng.IntN(secs)
		p.caPush = 600 + rng.IntN(600)
	}
	handler := func() http.Handler { return tracker.Handler(ev.Evaluates) }
	ev.running.Store(true)
	var reports, refused int
	body := `{}`
	var roundCPU time.Duration
	rounds := 0
	for s := 1; s <= secs; s++ {
		clk.Step(time.Second)
		if s == 900 {
			start()
			ev.running.Store(true)
		}
		h := handler()
		for i := range plan {
			p := &plan[i]
			switch s {
			case p.renewal:
				if err := writeSKR(ctx, fleet.Cluster(rts[i].ID), "ca-1", "cert-2-"+rts[i].ID); err != nil {
					t.Fatal(err)
				}
			case p.caPush:
				if err := writeSKR(ctx, fleet.Cluster(rts[i].ID), "ca-1+ca-2", "cert-3-"+rts[i].ID); err != nil {
					t.Fatal(err)
				}
			}
			restarting := false
			for k := range 2 {
				if s >= p.down[k] && s < p.up[k] {
					restarting = true
				}
			}
			// A webhook reports at start, then every interval.
			starting := s == p.up[0] || s == p.up[1]
			if restarting || (!starting && (s+p.phase)%int(interval/time.Second) != 0) {
				continue
			}
			r := httptest.NewRequest(http.MethodPost, contract.HealthPath, strings.NewReader(body))
			r.Header.Set(contract.HeaderRuntimeID, rts[i].ID)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			reports++
			if w.Code/100 != 2 {
				refused++
			}
		}
		if s%10 == 0 {
			before := processCPU()
			if err := ev.Round(ctx); err != nil {
				t.Fatal(err)
			}
			roundCPU += processCPU() - before
			rounds++
		}
	}
	var mem goruntime.MemStats
	goruntime.GC()
	goruntime.ReadMemStats(&mem)
	t.Logf("%d runtimes, %s simulated: %d reports (%.3f/s per runtime), %d refused; %d flag changes, at most %d flagged at once",
		n, duration, reports, float64(reports)/float64(n)/duration.Seconds(), refused, rep.changes, rep.flaggedMax)
	t.Logf("probes: %d configuration checks (%.4f SKR reads/s per runtime), %d diagnoses; %d rounds, CPU per round %s (%.1f µs per runtime), heap in use %d MiB",
		prober.configs.Load(), float64(prober.configs.Load())/float64(n)/duration.Seconds(), prober.silent.Load(), rounds,
		(roundCPU / time.Duration(rounds)).Round(time.Microsecond), float64(roundCPU.Microseconds())/float64(rounds)/n, mem.HeapInuse>>20)
	if rep.changes != 0 || rep.flaggedMax != 0 || prober.silent.Load() != 0 {
		t.Fatalf("false alarms: %d flag changes, %d flagged at once, %d diagnoses of a silent runtime", rep.changes, rep.flaggedMax, prober.silent.Load())
	}
	if refused != 0 {
		t.Fatalf("%d reports refused", refused)
	}
	// The bound: a runtime that stops reporting is flagged at the next
	// round past 90 s of silence.
	for i := range 10 {
		plan[i].down[0], plan[i].up[0] = secs+1, secs*10
	}
	stopped := clk.Now()
	for s := secs + 1; ; s++ {
		clk.Step(time.Second)
		h := handler()
		for i := 10; i < n; i++ {
			if (s+plan[i].phase)%int(interval/time.Second) == 0 {
				r := httptest.NewRequest(http.MethodPost, contract.HealthPath, strings.NewReader(body))
				r.Header.Set(contract.HeaderRuntimeID, rts[i].ID)
				h.ServeHTTP(httptest.NewRecorder(), r)
			}
		}
		if s%10 == 0 {
			if err := ev.Round(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if rep.changes >= 10 {
			break
		}
		if clk.Since(stopped) > 2*time.Minute {
			t.Fatalf("after 2 min only %d of the 10 stopped runtimes flagged", rep.changes)
		}
	}
	if rep.changes != 10 || rep.flaggedMax != 10 {
		t.Fatalf("%d flag changes, %d flagged: want exactly the 10 stopped runtimes", rep.changes, rep.flaggedMax)
	}
	t.Logf("10 runtimes that stopped reporting flagged %s after their silence began (at most 30 s after their last report)", clk.Since(stopped))
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
