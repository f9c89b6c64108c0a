package e2e_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
)

// Faults only a cluster has (issue 41, item 3): each component's pod is
// deleted, and ext-authz and the gateway are restarted as `kubectl rollout
// restart` does, while a steady stream of changes is written to watched
// objects in the SKR. The project's rule holds through each: every change is
// followed by its event or by a resync of its runtime, so every object's
// final state reaches the example operator.
//
// Two sets of objects are written: the "during" set only until the deleted
// pod is gone (so its final states are written while the component is
// down or a replica short), the "through" set until after the Deployment
// has replaced the pod and a few changes more. The specs need the pods of
// real clusters (e2e.ClusterEnvironment, E2E_ENV=kind); the local suite
// leaves the label kind-only out (labelFilter in suite_test.go), and
// test/kind/e2e.sh selects kind-faults.
var _ = Describe("Pods of the system deleted and restarted", Label(kindOnly, "kind-faults"), Ordered, func() {
	// rolloutBound is how long a Deployment may take to replace a deleted
	// pod or to complete a rolling restart (both need seconds on an idle
	// kind; the bound leaves room for a loaded machine).
	const rolloutBound = 3 * time.Minute
	var (
		n  sample
		cl e2e.ClusterEnvironment
	)

	BeforeAll(func(ctx SpecContext) {
		var ok bool
		if cl, ok = env.(e2e.ClusterEnvironment); !ok {
			Fail(fmt.Sprintf("the kind-faults specs delete and restart the components' pods: they need an environment on clusters (e2e.ClusterEnvironment: E2E_ENV=kind, test/kind/e2e.sh), not %q; the local suite leaves the label %s out", envName(), kindOnly))
		}
		n = sample(env.Names())
		// Another spec may have deleted the sample Watcher.
		w := localenv.SampleWatcher()
		w.Name, w.Namespace = n.WatcherName, n.KymaNamespace
		if err := env.KCP().Create(ctx, w); err != nil && !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		pathReady(ctx, n)
	})

	for _, c := range []e2e.Component{
		e2e.ComponentExtAuthz, e2e.ComponentVSController, e2e.ComponentOperator, e2e.ComponentGateway, e2e.ComponentWebhook,
	} {
		It(fmt.Sprintf("loses no change when a pod of %s is deleted under a stream of SKR changes", c), func(ctx SpecContext) {
			w := cl.Workload(c)
			cs := clientsetOf(cl, w)
			Eventually(func(g Gomega) { g.Expect(rolledOut(ctx, g, cs, w, nil)).To(Succeed()) }).
				WithTimeout(rolloutBound).WithPolling(time.Second).Should(Succeed(), "%s is not rolled out before the fault", w)
			victim := pickVictim(ctx, cs, w)

			By("writing watched objects continuously")
			prefix := "fault-delete-" + string(c)
			during := startWriterOn(ctx, faultObjects(ctx, n, prefix+"-during", 2))
			through := startWriterOn(ctx, faultObjects(ctx, n, prefix+"-through", 2))
			DeferCleanup(func() { during.stop(); through.stop() })
			flowing(n, during, through)

			By(fmt.Sprintf("deleting pod %s of %s", victim.Name, w))
			deletedAt := time.Now()
			Expect(cs.CoreV1().Pods(w.Namespace).Delete(ctx, victim.Name, metav1.DeleteOptions{
				Preconditions: &metav1.Preconditions{UID: &victim.UID},
			})).To(Succeed())
			Eventually(func(g Gomega) { g.Expect(podGone(ctx, g, cs, victim)).To(BeTrue()) }).
				WithTimeout(rolloutBound).WithPolling(200*time.Millisecond).Should(Succeed(), "pod %s did not go", victim.Name)
			gone := time.Since(deletedAt)
			// The "during" set goes on until the pod is gone and a few
			// changes were written since the deletion: its final states are
			// written while the component is down or a replica short.
			Eventually(func() int { return during.countSince(deletedAt) }).Should(BeNumerically(">=", 3))
			during.stop()
			duringEnd := time.Since(deletedAt)

			By("waiting for the Deployment to replace it")
			Eventually(func(g Gomega) { g.Expect(rolledOut(ctx, g, cs, w, []types.UID{victim.UID})).To(Succeed()) }).
				WithTimeout(rolloutBound).WithPolling(time.Second).Should(Succeed(), "%s did not replace pod %s within %s", w, victim.Name, rolloutBound)
			recovered := time.Since(deletedAt)
			mark := time.Now()
			Eventually(func() int { return through.countSince(mark) }).Should(BeNumerically(">=", 20))
			through.stop()

			By("every object's final state reaches the operator, as its event or a resync")
			Expect(append(during.errors(), through.errors()...)).To(BeEmpty(), "SKR writes failed")
			slowest := expectFinalStates(n, during, through)
			AddReportEntry(fmt.Sprintf("pod of %s deleted", c), fmt.Sprintf(
				"pod %s gone after %s, replaced (Deployment rolled out) after %s; the during set's %d writes after the deletion ended at %s; %d SKR writes in all; slowest final state received %s after its write began",
				victim.Name, gone.Round(time.Millisecond), recovered.Round(time.Millisecond),
				during.countSince(deletedAt), duringEnd.Round(time.Millisecond), during.count()+through.count(), slowest.Round(time.Millisecond)))
		}, NodeTimeout(12*time.Minute))
	}

	for _, c := range []e2e.Component{e2e.ComponentExtAuthz, e2e.ComponentGateway} {
		It(fmt.Sprintf("loses no change while %s is restarted (rollout restart) under a stream of SKR changes", c), func(ctx SpecContext) {
			w := cl.Workload(c)
			cs := clientsetOf(cl, w)
			Eventually(func(g Gomega) { g.Expect(rolledOut(ctx, g, cs, w, nil)).To(Succeed()) }).
				WithTimeout(rolloutBound).WithPolling(time.Second).Should(Succeed(), "%s is not rolled out before the restart", w)
			var old []types.UID
			for _, p := range workloadPods(ctx, Default, cs, w) {
				old = append(old, p.UID)
			}
			Expect(old).NotTo(BeEmpty())

			By("writing watched objects continuously")
			wr := startWriterOn(ctx, faultObjects(ctx, n, "fault-restart-"+string(c), 4))
			DeferCleanup(func() { wr.stop() })
			flowing(n, wr)

			By(fmt.Sprintf("restarting %s as `kubectl rollout restart` does", w))
			restartedAt := time.Now()
			patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, restartedAt.Format(time.RFC3339))
			dep, err := cs.AppsV1().Deployments(w.Namespace).Patch(ctx, w.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
			Expect(err).NotTo(HaveOccurred())
			generation := dep.Generation
			Eventually(func(g Gomega) {
				d := deployment(ctx, g, cs, w)
				g.Expect(d.Status.ObservedGeneration).To(BeNumerically(">=", generation), "the restart is not observed yet")
				g.Expect(rolledOut(ctx, g, cs, w, old)).To(Succeed())
			}).WithTimeout(rolloutBound).WithPolling(time.Second).Should(Succeed(), "the rolling restart of %s did not complete within %s", w, rolloutBound)
			rolled := time.Since(restartedAt)
			mark := time.Now()
			Eventually(func() int { return wr.countSince(mark) }).Should(BeNumerically(">=", 20))
			wr.stop()

			By("every object's final state reaches the operator, as its event or a resync")
			Expect(wr.errors()).To(BeEmpty(), "SKR writes failed")
			slowest := expectFinalStates(n, wr)
			AddReportEntry(fmt.Sprintf("%s restarted", c), fmt.Sprintf(
				"rollout of %d pod(s) completed after %s; %d SKR writes during the restart (%d in all); slowest final state received %s after its write began",
				len(old), rolled.Round(time.Millisecond), wr.countBetween(restartedAt, mark), wr.count(), slowest.Round(time.Millisecond)))
		}, NodeTimeout(12*time.Minute))
	}
})

func clientsetOf(cl e2e.ClusterEnvironment, w e2e.Workload) kubernetes.Interface {
	if w.InSKR {
		return cl.SKRClientset()
	}
	return cl.KCPClientset()
}

func deployment(ctx context.Context, g Gomega, cs kubernetes.Interface, w e2e.Workload) *appsv1.Deployment {
	d, err := cs.AppsV1().Deployments(w.Namespace).Get(ctx, w.Name, metav1.GetOptions{})
	g.Expect(err).NotTo(HaveOccurred(), "Deployment %s", w)
	return d
}

// workloadPods are the pods of w's Deployment (its selector), terminating
// ones included.
func workloadPods(ctx context.Context, g Gomega, cs kubernetes.Interface, w e2e.Workload) []corev1.Pod {
	d := deployment(ctx, g, cs, w)
	sel, err := metav1.LabelSelectorAsSelector(d.Spec.Selector)
	g.Expect(err).NotTo(HaveOccurred())
	pods, err := cs.CoreV1().Pods(w.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel.String()})
	g.Expect(err).NotTo(HaveOccurred())
	return pods.Items
}

// rolledOut tells why w is not rolled out (nil when it is), as `kubectl
// rollout status` judges a Deployment, and further: exactly spec.replicas
// pods, none terminating, all ready, none of gone among them.
func rolledOut(ctx context.Context, g Gomega, cs kubernetes.Interface, w e2e.Workload, gone []types.UID) error {
	d := deployment(ctx, g, cs, w)
	want := int32(1)
	if d.Spec.Replicas != nil {
		want = *d.Spec.Replicas
	}
	st := d.Status
	for _, c := range st.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Reason == "ProgressDeadlineExceeded" {
			return fmt.Errorf("progress deadline exceeded: %s", c.Message)
		}
	}
	switch {
	case st.ObservedGeneration < d.Generation:
		return fmt.Errorf("generation %d not observed yet (%d)", d.Generation, st.ObservedGeneration)
	case st.UpdatedReplicas < want:
		return fmt.Errorf("%d of %d replicas updated", st.UpdatedReplicas, want)
	case st.Replicas > st.UpdatedReplicas:
		return fmt.Errorf("%d old replicas pending termination", st.Replicas-st.UpdatedReplicas)
	case st.AvailableReplicas < st.UpdatedReplicas:
		return fmt.Errorf("%d of %d updated replicas available", st.AvailableReplicas, st.UpdatedReplicas)
	}
	pods := workloadPods(ctx, g, cs, w)
	if int32(len(pods)) != want {
		return fmt.Errorf("%d pods, want %d", len(pods), want)
	}
	for _, p := range pods {
		switch {
		case p.DeletionTimestamp != nil:
			return fmt.Errorf("pod %s is terminating", p.Name)
		case slices.Contains(gone, p.UID):
			return fmt.Errorf("pod %s is still there", p.Name)
		case !podReady(&p):
			return fmt.Errorf("pod %s is not ready", p.Name)
		}
	}
	return nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podGone: p no longer exists (a pod of the same name but another UID is
// another pod).
func podGone(ctx context.Context, g Gomega, cs kubernetes.Interface, p corev1.Pod) bool {
	now, err := cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return true
	}
	g.Expect(err).NotTo(HaveOccurred())
	return now.UID != p.UID
}

// pickVictim is the pod of w to delete: the holder of w's leader election
// Lease when it has one (the replica doing the work), else the first ready
// pod by name.
func pickVictim(ctx context.Context, cs kubernetes.Interface, w e2e.Workload) corev1.Pod {
	GinkgoHelper()
	var victim corev1.Pod
	Eventually(func(g Gomega) {
		pods := workloadPods(ctx, g, cs, w)
		slices.SortFunc(pods, func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) })
		holder := ""
		if w.LeaderLease != "" {
			l, err := cs.CoordinationV1().Leases(w.Namespace).Get(ctx, w.LeaderLease, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred(), "leader election Lease %s/%s", w.Namespace, w.LeaderLease)
			g.Expect(l.Spec.HolderIdentity).NotTo(BeNil(), "Lease %s has no holder", w.LeaderLease)
			// controller-runtime's identity: <hostname>_<uuid>, the
			// hostname being the pod's name.
			holder, _, _ = strings.Cut(*l.Spec.HolderIdentity, "_")
		}
		for _, p := range pods {
			if p.DeletionTimestamp == nil && podReady(&p) && (holder == "" || p.Name == holder) {
				victim = p
				return
			}
		}
		g.Expect(false).To(BeTrue(), "no ready pod of %s (leader %q) among %d", w, holder, len(pods))
	}).WithTimeout(2 * time.Minute).WithPolling(time.Second).Should(Succeed())
	return victim
}

// faultObjects creates count watched objects named prefix-<i> in the SKR
// and deletes them when the spec ends.
func faultObjects(ctx context.Context, n sample, prefix string, count int) []*unstructured.Unstructured {
	GinkgoHelper()
	kymas := make([]*unstructured.Unstructured, count)
	for i := range kymas {
		kymas[i] = n.watchedKyma(fmt.Sprintf("%s-%d", prefix, i))
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, kymas[i]))).To(Succeed())
		k := kymas[i]
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, k))).To(Succeed()) })
	}
	return kymas
}

// flowing waits until the changes of every object the writers write reach
// the operator: the path works before a fault is made.
func flowing(n sample, writers ...*writer) {
	GinkgoHelper()
	since := time.Now()
	for _, w := range writers {
		for _, name := range w.names() {
			Eventually(func() []string { return runtimeIDs(received.For(n.SKRNamespace, name, since)) }).
				Should(ContainElement(n.RuntimeID), "changes of %s do not reach the operator before the fault", name)
		}
	}
}

// finalStateReached: the write sp (the last of its object) was followed by
// an event for the object from the sample runtime (received once the write
// began: admission happens during it) or by a resync of the runtime
// (received after the write was answered); at is when the first of them was
// received.
func finalStateReached(n sample, sp writeSpan) (at time.Time, ok bool) {
	for _, ev := range received.For(n.SKRNamespace, sp.name, sp.start) {
		if ev.RuntimeID == n.RuntimeID {
			at, ok = ev.Time, true
			break
		}
	}
	for _, ev := range received.For("", "", sp.end) {
		if ev.Resync != "" && ev.RuntimeID == n.RuntimeID && (!ok || ev.Time.Before(at)) {
			at, ok = ev.Time, true
			break
		}
	}
	return at, ok
}

// expectFinalStates waits until the final state of every object the writers
// wrote reached the operator and returns the longest time from a final
// write's start to its event or resync.
func expectFinalStates(n sample, writers ...*writer) time.Duration {
	GinkgoHelper()
	var slowest time.Duration
	for _, w := range writers {
		for _, sp := range w.lastSpans() {
			var at time.Time
			Eventually(func() bool {
				var ok bool
				at, ok = finalStateReached(n, sp)
				return ok
			}).Should(BeTrue(),
				"the final state of %s (written %s) reached the operator neither as its event nor as a resync of %s",
				sp.name, sp.start.Format(time.RFC3339Nano), n.RuntimeID)
			slowest = max(slowest, at.Sub(sp.start))
		}
	}
	return slowest
}

// lastSpans is, per object, its last successful write.
func (w *writer) lastSpans() []writeSpan {
	last := map[string]writeSpan{}
	for _, sp := range w.writeSpans() {
		last[sp.name] = sp
	}
	out := make([]writeSpan, 0, len(last))
	for _, sp := range last {
		out = append(out, sp)
	}
	slices.SortFunc(out, func(a, b writeSpan) int { return strings.Compare(a.name, b.name) })
	return out
}

// names are the objects w writes.
func (w *writer) names() []string {
	return w.objects
}

// countSince is how many successful writes began at or after t.
func (w *writer) countSince(t time.Time) int {
	return w.countBetween(t, time.Time{})
}

// countBetween is how many successful writes began in [from, to) (to zero:
// no end).
func (w *writer) countBetween(from, to time.Time) int {
	c := 0
	for _, sp := range w.writeSpans() {
		if !sp.start.Before(from) && (to.IsZero() || sp.start.Before(to)) {
			c++
		}
	}
	return c
}
