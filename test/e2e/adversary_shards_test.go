package e2e_test

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncmanager"
	"github.com/seed-c8be168e/runtime-watcher/shards"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/promtext"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Attacks on shard membership (issue 40 finding 4, docs/security.md "Shard
// membership"), against module-sync as 2 real replicas on real API servers
// with the policy of manifests/kcp/base/shard-lease-policy.yaml: an
// operator deployed in kcp-system holds Lease write there for its own
// leader election; one member Lease it wrote (holder zz, its own view,
// leaseDurationSeconds 2147483647) stopped all sharded work.
var _ = Describe("Adversaries against shard membership", Label("adversary"), Ordered, func() {
	const lease = 6 * time.Second
	var (
		sh      e2e.ShardsEnvironment
		ms      e2e.ModuleSyncEnvironment
		members *localenv.Replicas
		want    string // the view of the replicas
	)
	ns := func() string { return env.Names().KymaNamespace }
	forged := func(name string) *coordinationv1.Lease {
		now := metav1.NewMicroTime(time.Now())
		return &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns(), Labels: map[string]string{shards.LabelGroup: syncmanager.ShardGroup},
				Annotations: map[string]string{shards.AnnotationView: "zz"}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("zz"), LeaseDurationSeconds: ptr.To(int32(math.MaxInt32)), AcquireTime: &now, RenewTime: &now},
		}
	}
	// ownedEverywhere: every replica publishes want (the replicas alone:
	// no one else is a member in their views), and their own counts of the
	// runtimes they own add up to every Kyma's.
	ownedEverywhere := func(ctx context.Context) func(g Gomega) {
		return func(g Gomega) {
			v, err := memberViews(ctx, syncmanager.ShardGroup, lease)
			g.Expect(err).NotTo(HaveOccurred())
			owned := 0.0
			for _, r := range members.Replicas() {
				g.Expect(v).To(HaveKeyWithValue(r.Identity, want))
				text, err := promtext.Fetch(ctx, r.MetricsURL)
				g.Expect(err).NotTo(HaveOccurred())
				n, _ := promtext.Sum(text, "runtime_watcher_shard_owned_runtimes", map[string]string{"group": syncmanager.ShardGroup})
				owned += n
			}
			kymas := &unstructured.UnstructuredList{}
			kymas.SetGroupVersionKind(v1beta2.KymaGroupVersionKind.GroupVersion().WithKind("KymaList"))
			g.Expect(env.KCP().List(ctx, kymas, client.InNamespace(ns()))).To(Succeed())
			g.Expect(owned).To(BeNumerically("==", len(kymas.Items)), "runtimes owned by the replicas, of %d Kymas", len(kymas.Items))
		}
	}

	BeforeAll(func(ctx SpecContext) {
		var ok bool
		if sh, ok = env.(e2e.ShardsEnvironment); !ok {
			Fail("the " + envName() + " environment cannot run module-sync as shards: leave out the adversary label there")
		}
		if ms, ok = env.(e2e.ModuleSyncEnvironment); !ok {
			Fail("the " + envName() + " environment cannot act as another KCP user")
		}
		var err error
		members, err = sh.ShardModuleSync(ctx, 2, lease)
		DeferCleanup(func(ctx SpecContext) {
			Expect(members.Restore(ctx)).To(Succeed())
		}, NodeTimeout(2*time.Minute))
		Expect(err).NotTo(HaveOccurred())
		var ids []string
		for _, r := range members.Replicas() {
			ids = append(ids, r.Identity)
		}
		slices.Sort(ids)
		want = strings.Join(ids, ",")
		Eventually(ownedEverywhere(ctx)).WithTimeout(time.Minute).Should(Succeed())
	}, NodeTimeout(3*time.Minute))

	It("refuses a member Lease written as an operator of kcp-system, and without the policy ignores one not named for its holder: every runtime stays owned", func(ctx SpecContext) {
		By("giving an operator's ServiceAccount Lease write in " + ns() + ", as its own leader election needs")
		user := "system:serviceaccount:" + ns() + ":e2e-operator"
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "e2e-operator-leader-election", Namespace: ns()},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: role.Name, Namespace: ns()},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}}
		Expect(env.KCP().Create(ctx, role)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, role)).To(Succeed()) })
		Expect(env.KCP().Create(ctx, binding)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, binding)).To(Succeed()) })
		operator, err := ms.KCPAs(user)
		Expect(err).NotTo(HaveOccurred())
		own := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "e2e-operator", Namespace: ns()}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("pod-1")}}
		Eventually(func() error { return operator.Create(ctx, own) }).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the operator's own Lease")
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, own)).To(Succeed()) })

		By("writing, as the operator, the member Lease of issue 40 under its holder's name and under another: refused")
		for _, name := range []string{syncmanager.ShardGroup + "-shard-zz", "e2e-forged"} {
			err := operator.Create(ctx, forged(name))
			Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator's member Lease %s: %v", name, err)
			Expect(err.Error()).To(ContainSubstring("may not write member Leases of shard group " + syncmanager.ShardGroup))
		}
		By("changing and deleting, as the operator, a replica's member Lease: refused")
		member := &coordinationv1.Lease{}
		Expect(env.KCP().Get(ctx, client.ObjectKey{Namespace: ns(), Name: syncmanager.ShardGroup + "-shard-" + members.Replicas()[0].Identity}, member)).To(Succeed())
		member.Spec.LeaseDurationSeconds = ptr.To(int32(math.MaxInt32))
		member.Annotations[shards.AnnotationView] = "zz"
		err = operator.Update(ctx, member)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator's change of a member Lease: %v", err)
		err = operator.Delete(ctx, member)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "the operator's delete of a member Lease: %v", err)

		By("writing, as a cluster admin, a member Lease not named for its holder: refused too")
		err = env.KCP().Create(ctx, forged("e2e-forged"))
		Expect(apierrors.IsForbidden(err) || apierrors.IsInvalid(err)).To(BeTrue(), "a cluster admin's member Lease e2e-forged held by zz: %v", err)

		By("without the policy (its binding removed, as on an install that lacks it), a member Lease not named for its holder: ignored by the replicas")
		Expect(env.KCP().Delete(ctx, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{ObjectMeta: metav1.ObjectMeta{Name: "shard-leases.operator.kyma-project.io"}})).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(testenv.InstallPolicy(ctx, env.KCP(), localenv.ShardLeasePolicyPath())).To(Succeed())
		})
		slipped := forged("e2e-forged")
		Eventually(func() error { return env.KCP().Create(ctx, slipped) }).WithContext(ctx).WithTimeout(30*time.Second).Should(Succeed(), "the binding's removal in effect")
		DeferCleanup(func(ctx SpecContext) { Expect(env.KCP().Delete(ctx, slipped)).To(Succeed()) })
		// Over two Lease periods (many rounds of every replica) no replica
		// takes zz for a member and every runtime stays owned.
		Consistently(ownedEverywhere(ctx)).WithTimeout(2 * lease).WithPolling(500 * time.Millisecond).Should(Succeed())
		for _, r := range members.Replicas() {
			text, err := promtext.Fetch(ctx, r.MetricsURL)
			Expect(err).NotTo(HaveOccurred())
			n, _ := promtext.Sum(text, "runtime_watcher_shard_leases_ignored_total", map[string]string{"group": syncmanager.ShardGroup, "reason": "name"})
			Expect(n).To(BeNumerically(">=", 1), fmt.Sprintf("%s did not count the Lease it ignored", r.Identity))
		}
	})
})
