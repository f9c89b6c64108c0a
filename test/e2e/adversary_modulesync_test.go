package e2e_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/api/v1alpha1"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/mirror"
	"github.com/seed-c8be168e/runtime-watcher/module-sync/syncresources"
	"github.com/seed-c8be168e/runtime-watcher/test/e2e"
	"github.com/seed-c8be168e/runtime-watcher/test/localenv"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Attacks of a module manager and of an SKR owner on module-sync
// (docs/security.md, ARCHITECTURE §3.12), each against the real binaries
// and refused: what a module writes is bounded by its ModuleGrant, enforced
// by the SKR's RBAC for the module's user; module-sync deletes only what it
// created; a module manager writes only its module's SyncResources (the
// ValidatingAdmissionPolicy); spec.kyma is immutable; the module name
// comes from module-sync's configuration, not from the SKR.
var _ = Describe("module-sync under attack", Label("adversary"), Ordered, func() {
	const within = 10 * time.Second
	var ms e2e.ModuleSyncEnvironment

	BeforeAll(func(ctx SpecContext) {
		var ok bool
		if ms, ok = env.(e2e.ModuleSyncEnvironment); !ok {
			Fail("the " + envName() + " environment does not deploy module-sync: leave out the adversary label there")
		}
		// The example module manager's SyncResource (the victim of the
		// attacks on SyncResources) exists once the demo Module CR does.
		Expect(ms.SetSample(ctx, "adversary", 1)).To(Succeed())
		Eventually(func() error { return env.KCP().Get(ctx, localenv.SampleModuleConfig(), &v1alpha1.SyncResource{}) }).
			WithTimeout(2*time.Minute).Should(Succeed(), "the example module manager wrote no SyncResource")
	})

	// attack creates a SyncResource of module sample with items and waits
	// for module-sync's verdict on each.
	attack := func(ctx SpecContext, name string, items ...v1alpha1.SyncItem) *v1alpha1.SyncResource {
		sr := &v1alpha1.SyncResource{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: localenv.KymaNamespace, Annotations: writtenBy(ctx, env.KCP())},
			Spec:       v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: localenv.SampleModule, Items: items},
		}
		Expect(env.KCP().Create(ctx, sr)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, sr))).To(Succeed())
			Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(sr), &v1alpha1.SyncResource{}) }).
				WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
		})
		got := &v1alpha1.SyncResource{}
		Eventually(func(g Gomega) {
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(sr), got)).To(Succeed())
			g.Expect(got.Status.ObservedGeneration).To(Equal(got.Generation))
			g.Expect(got.Status.Items).To(HaveLen(len(items)))
		}).WithTimeout(within).Should(Succeed())
		return got
	}

	It("refuses a ClusterRoleBinding to cluster-admin (outside the module's grant)", func(ctx SpecContext) {
		crb := item("escalate", `{"apiVersion":"rbac.authorization.k8s.io/v1","kind":"ClusterRoleBinding","metadata":{"name":"e2e-escalate"},`+
			`"roleRef":{"apiGroup":"rbac.authorization.k8s.io","kind":"ClusterRole","name":"cluster-admin"},`+
			`"subjects":[{"kind":"User","apiGroup":"rbac.authorization.k8s.io","name":"attacker"}]}`)
		got := attack(ctx, "e2e-attack-crb", crb)
		Expect(got.Status.Items[0].State).To(Equal(v1alpha1.ItemRefused))
		Expect(got.Status.Items[0].Message).To(ContainSubstring("ModuleGrant kcp-system/sample does not grant"))
		Expect(apierrors.IsNotFound(env.SKR().Get(ctx, client.ObjectKey{Name: "e2e-escalate"}, &rbacv1.ClusterRoleBinding{}))).
			To(BeTrue(), "the ClusterRoleBinding reached the SKR")
	})

	It("refuses to delete kube-system objects and objects it did not create", func(ctx SpecContext) {
		victims := []client.ObjectKey{{Namespace: "kube-system", Name: "e2e-victim"}, {Namespace: localenv.SKRNamespace, Name: "e2e-victim"}}
		for _, k := range victims {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: k.Name, Namespace: k.Namespace}}
			Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, cm))).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, cm))).To(Succeed()) })
		}
		del := func(name string, k client.ObjectKey) v1alpha1.SyncItem {
			it := item(name, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q}}`, k.Name, k.Namespace))
			it.Strategy = v1alpha1.Delete
			return it
		}
		got := attack(ctx, "e2e-attack-delete", del("kube-system", victims[0]), del("foreign", victims[1]))
		Expect(got.Status.Items).To(ConsistOf(
			SatisfyAll(HaveField("Name", "kube-system"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring(`"kube-system"`))),
			SatisfyAll(HaveField("Name", "foreign"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring("not created by this SyncResource"))),
		))
		for _, k := range victims {
			Expect(env.SKR().Get(ctx, k, &corev1.ConfigMap{})).To(Succeed(), "%s was deleted", k)
		}
	})

	It("refuses module A's manager creating, editing or deleting module B's SyncResource", func(ctx SpecContext) {
		const user = "system:serviceaccount:kcp-system:e2e-intruder-manager"
		grant := &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: "e2e-intruder", Namespace: localenv.KymaNamespace},
			Spec: v1alpha1.ModuleGrantSpec{Managers: []string{user}}}
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "e2e-intruder", Namespace: localenv.KymaNamespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"syncresources"},
				Verbs: []string{"get", "list", "create", "update", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-intruder", Namespace: localenv.KymaNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "e2e-intruder-manager", Namespace: localenv.KymaNamespace}}}
		for _, o := range []client.Object{grant, role, binding} {
			Expect(env.KCP().Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, o))).To(Succeed()) })
		}
		intruder, err := ms.KCPAs(user)
		Expect(err).NotTo(HaveOccurred())
		victim := &v1alpha1.SyncResource{}
		Expect(env.KCP().Get(ctx, localenv.SampleModuleConfig(), victim)).To(Succeed(), "the example module manager's SyncResource")

		// The API server takes up a new ModuleGrant (a policy parameter)
		// within moments: until then RBAC alone would let the edit through,
		// so the first refusal is awaited; every later one must hold.
		Eventually(func(g Gomega) {
			sr := victim.DeepCopy()
			g.Expect(intruder.Get(ctx, client.ObjectKeyFromObject(sr), sr)).To(Succeed())
			sr.Spec.Items = append(sr.Spec.Items, item("injected", configMapJSON("e2e-injected")))
			sr.Annotations[v1alpha1.AnnotationWrittenBy] = user // as the writer policy wants: the grant policy refuses
			err := intruder.Update(ctx, sr)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "edit of module sample's SyncResource: %v", err)
			// Both policies refuse it; the API server names one of them.
			g.Expect(err.Error()).To(MatchRegexp("manages module e2e-intruder|may not write SyncResources of module sample"))
		}).WithTimeout(within).Should(Succeed())
		Expect(apierrors.IsForbidden(intruder.Delete(ctx, victim.DeepCopy()))).To(BeTrue(), "delete of module sample's SyncResource")
		forged := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: "e2e-forged", Namespace: localenv.KymaNamespace},
			Spec: v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: localenv.SampleModule, Items: []v1alpha1.SyncItem{item("x", configMapJSON("e2e-forged"))}}}
		Expect(apierrors.IsForbidden(intruder.Create(ctx, forged))).To(BeTrue(), "create of a SyncResource of module sample")
		Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(victim), victim)).To(Succeed())
		Expect(victim.Spec.Items).NotTo(ContainElement(HaveField("Name", "injected")))
	})

	// Issue 33: a grant of Deployments in kyma-system let the module's
	// workloads mount the bundle's skr-webhook-tls (the runtime's KCP
	// client key) and run as any ServiceAccount there; the SKR API server
	// accepted it. Now its own admission (the policy module-sync keeps
	// there) refuses it for the module's identity.
	It("refuses a module's workloads that mount the bundle's Secret or run as another ServiceAccount", func(ctx SpecContext) {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "e2e-privileged-sa", Namespace: localenv.SKRNamespace}}
		Expect(client.IgnoreAlreadyExists(env.SKR().Create(ctx, sa))).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, sa))).To(Succeed()) })
		deployment := func(name, podSpec string) v1alpha1.SyncItem {
			return item(name, fmt.Sprintf(`{"apiVersion":"apps/v1","kind":"Deployment","metadata":{"name":%q,"namespace":%q},`+
				`"spec":{"selector":{"matchLabels":{"app":%q}},"template":{"metadata":{"labels":{"app":%q}},"spec":%s}}}`,
				name, localenv.SKRNamespace, name, name, podSpec))
		}
		got := attack(ctx, "e2e-attack-workloads",
			deployment("e2e-steal-key", `{"automountServiceAccountToken":false,"containers":[{"name":"c","image":"x"}],`+
				`"volumes":[{"name":"key","secret":{"secretName":"skr-webhook-tls"}}]}`),
			deployment("e2e-other-sa", `{"serviceAccountName":"e2e-privileged-sa","containers":[{"name":"c","image":"x"}]}`),
			deployment("e2e-host", `{"automountServiceAccountToken":false,"hostNetwork":true,"containers":[{"name":"c","image":"x"}]}`),
		)
		Expect(got.Status.Items).To(ConsistOf(
			SatisfyAll(HaveField("Name", "e2e-steal-key"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring("may not use the Secrets skr-webhook-tls"))),
			SatisfyAll(HaveField("Name", "e2e-other-sa"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring("ServiceAccount e2e-privileged-sa"))),
			SatisfyAll(HaveField("Name", "e2e-host"), HaveField("State", v1alpha1.ItemRefused), HaveField("Message", ContainSubstring("host namespaces"))),
		))
		for _, name := range []string{"e2e-steal-key", "e2e-other-sa", "e2e-host"} {
			Expect(apierrors.IsNotFound(env.SKR().Get(ctx, client.ObjectKey{Namespace: localenv.SKRNamespace, Name: name}, &appsv1.Deployment{}))).
				To(BeTrue(), "Deployment %s reached the SKR", name)
		}
	})

	// Issue 33: a module granted ConfigMaps in kyma-system adopted and
	// rewrote the bundle's managers file (heartbeat opt-in) and could write
	// the take-over objects: every name of the bundle's one list is refused.
	It("refuses the bundle's managers file and take-over objects, even with adopt", func(ctx SpecContext) {
		var items []v1alpha1.SyncItem
		for _, name := range []string{"skr-webhook-managers", "skr-webhook-takeover", "skr-webhook-takeover-tls"} {
			it := item(name, fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":%q,"namespace":%q},"data":{"managers":"attacker heartbeats\n"}}`,
				name, localenv.SKRNamespace))
			it.Adopt = true
			items = append(items, it)
		}
		// The bundle's managers file is vs-controller's: a spec before this
		// one may have had vs-controller re-push the bundle (a restart, a
		// take-over), so it is awaited, not assumed.
		before := &corev1.ConfigMap{}
		Eventually(func() error {
			return env.SKR().Get(ctx, client.ObjectKey{Namespace: localenv.SKRNamespace, Name: "skr-webhook-managers"}, before)
		}).WithTimeout(time.Minute).Should(Succeed(), "the bundle's managers file is not in the SKR")
		got := attack(ctx, "e2e-attack-bundle", items...)
		for _, st := range got.Status.Items {
			Expect(st.State).To(Equal(v1alpha1.ItemRefused), "%s", st.Name)
			Expect(st.Message).To(ContainSubstring("watcher's bundle"), "%s", st.Name)
		}
		after := &corev1.ConfigMap{}
		Expect(env.SKR().Get(ctx, client.ObjectKeyFromObject(before), after)).To(Succeed())
		Expect(after.Data).To(Equal(before.Data), "the managers file was rewritten")
		Expect(after.Annotations).NotTo(HaveKey("operator.kyma-project.io/sync-resource"))
	})

	// Issue 33: a manager whose grant is not installed yet (or was
	// removed) still holds the standard module-manager RBAC; it created a
	// SyncResource of another module, which stayed after its own grant
	// appeared. Now the KCP refuses every write of a writer no grant names,
	// and what a manager wrote before its grant stopped naming it is
	// Refused: nothing of it is applied any more.
	It("refuses SyncResources of a manager no grant names, and stops applying what it wrote once its grant drops it", func(ctx SpecContext) {
		const user = "system:serviceaccount:kcp-system:e2e-orphan-manager"
		role := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "e2e-orphan", Namespace: localenv.KymaNamespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"syncresources"},
				Verbs: []string{"get", "list", "create", "update", "delete"}}}}
		binding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "e2e-orphan", Namespace: localenv.KymaNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: role.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "e2e-orphan-manager", Namespace: localenv.KymaNamespace}}}
		for _, o := range []client.Object{role, binding} {
			Expect(env.KCP().Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, o))).To(Succeed()) })
		}
		orphan, err := ms.KCPAs(user)
		Expect(err).NotTo(HaveOccurred())
		sr := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: "e2e-orphaned", Namespace: localenv.KymaNamespace},
			Spec: v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: localenv.SampleModule, Items: []v1alpha1.SyncItem{item("x", configMapJSON("e2e-orphaned"))}}}
		// Recording somebody else as the writer is refused by the KCP.
		forged := sr.DeepCopy()
		forged.Annotations = map[string]string{v1alpha1.AnnotationWrittenBy: "system:serviceaccount:kcp-system:sample-module-manager"}
		err = orphan.Create(ctx, forged)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a SyncResource recording another writer: %v", err)
		// Recording itself, it is still named by no grant: refused too.
		sr.Annotations = map[string]string{v1alpha1.AnnotationWrittenBy: user}
		err = orphan.Create(ctx, sr.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a SyncResource of a writer no grant names: %v", err)
		Expect(err.Error()).To(ContainSubstring("may not write SyncResources of module sample: no ModuleGrant kcp-system/sample names it"))

		By("installing the orphan's own grant: module sample's SyncResources stay out of its reach")
		grant := &v1alpha1.ModuleGrant{ObjectMeta: metav1.ObjectMeta{Name: "e2e-orphan", Namespace: localenv.KymaNamespace},
			Spec: v1alpha1.ModuleGrantSpec{Managers: []string{user}, Kinds: []v1alpha1.GrantedKind{{Kind: "ConfigMap"}}, Namespaces: []string{localenv.SKRNamespace}}}
		Expect(env.KCP().Create(ctx, grant)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, grant))).To(Succeed()) })
		mine := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: "e2e-own", Namespace: localenv.KymaNamespace,
			Annotations: map[string]string{v1alpha1.AnnotationWrittenBy: user}},
			Spec: v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: "e2e-orphan", Items: []v1alpha1.SyncItem{item("own", configMapJSON("e2e-own"))}}}
		// module-sync gives the grant's managers their verb (Role and
		// RoleBinding module-manager.e2e-orphan); RBAC takes it up a moment
		// later.
		Eventually(func() error { return orphan.Create(ctx, mine) }).WithTimeout(within).Should(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, mine))).To(Succeed())
			Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(mine), &v1alpha1.SyncResource{}) }).
				WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
		})
		err = orphan.Create(ctx, sr.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a SyncResource of module sample by the manager of e2e-orphan: %v", err)
		Expect(apierrors.IsNotFound(env.SKR().Get(ctx, client.ObjectKey{Namespace: localenv.SKRNamespace, Name: "e2e-orphaned"}, &corev1.ConfigMap{}))).
			To(BeTrue(), "the orphan's ConfigMap reached the SKR")

		own := client.ObjectKey{Namespace: localenv.SKRNamespace, Name: "e2e-own"}
		Eventually(func() error { return env.SKR().Get(ctx, own, &corev1.ConfigMap{}) }).WithTimeout(within).Should(Succeed())

		By("taking the grant's manager away: what it wrote is Refused and no longer applied, and it writes no more")
		Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(grant), grant)).To(Succeed())
		grant.Spec.Managers = nil
		Expect(env.KCP().Update(ctx, grant)).To(Succeed())
		Eventually(func(g Gomega) {
			got := &v1alpha1.SyncResource{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(mine), got)).To(Succeed())
			g.Expect(got.Status.State).To(Equal(v1alpha1.StateRefused))
			c := meta.FindStatusCondition(got.Status.Conditions, "Synced")
			g.Expect(c).NotTo(BeNil())
			g.Expect(c.Reason).To(Equal("WriterNotGranted"))
			g.Expect(c.Message).To(ContainSubstring("whom ModuleGrant kcp-system/e2e-orphan does not name"))
		}).WithTimeout(within).Should(Succeed())
		Eventually(func(g Gomega) {
			got := &v1alpha1.SyncResource{}
			g.Expect(orphan.Get(ctx, client.ObjectKeyFromObject(mine), got)).To(Succeed())
			got.Spec.Items = append(got.Spec.Items, item("more", configMapJSON("e2e-more")))
			err := orphan.Update(ctx, got)
			g.Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a spec change by a manager the grant dropped: %v", err)
		}).WithTimeout(within).Should(Succeed())
		// Drift in the runtime is no longer corrected: the SyncResource is inert.
		cm := &corev1.ConfigMap{}
		Expect(env.SKR().Get(ctx, own, cm)).To(Succeed())
		cm.Data = map[string]string{"k": "changed-in-the-runtime"}
		Expect(env.SKR().Update(ctx, cm)).To(Succeed())
		Consistently(func(g Gomega) {
			g.Expect(env.SKR().Get(ctx, own, cm)).To(Succeed())
			g.Expect(cm.Data["k"]).To(Equal("changed-in-the-runtime"))
		}).WithTimeout(3 * localenv.DriftInterval).Should(Succeed())
		Expect(client.IgnoreNotFound(env.SKR().Delete(ctx, cm))).To(Succeed())
	})

	// Issue 40: a manager no ModuleGrant names, holding the standard
	// module-manager RBAC, deleted module sample's SyncResource (module-sync's
	// finalizer then removed what it created in the runtime) or stripped its
	// finalizer; the writer policy bound only creates and spec changes. Now
	// both need the verb manage on modulegrants/sample, which the grant's
	// own manager and module-sync hold.
	It("refuses a manager no grant names deleting or un-finalizing another module's SyncResource, while the module's manager and module-sync may", func(ctx SpecContext) {
		const (
			stranger = "system:serviceaccount:kcp-system:e2e-stranger-manager"
			granted  = "system:serviceaccount:kcp-system:sample-module-manager" // named by ModuleGrant sample
			syncer   = "system:serviceaccount:kcp-system:module-sync"
		)
		managers := &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "e2e-syncresource-writers", Namespace: localenv.KymaNamespace},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"syncresources"},
				Verbs: []string{"get", "list", "update", "patch", "delete", "deletecollection"}}}}
		managersBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: managers.Name, Namespace: localenv.KymaNamespace},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: managers.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "e2e-stranger-manager", Namespace: localenv.KymaNamespace},
				{Kind: "ServiceAccount", Name: "sample-module-manager", Namespace: localenv.KymaNamespace}}}
		// module-sync's production Role (manifests/kcp/rbac-module-sync),
		// under another name: the local module-sync runs as the admin.
		syncRole := &rbacv1.Role{}
		b, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "manifests", "kcp", "rbac-module-sync", "role.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(yaml.UnmarshalStrict(b, syncRole)).To(Succeed())
		syncRole.Name, syncRole.Namespace = "e2e-module-sync", localenv.KymaNamespace
		syncBinding := &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: syncRole.Name, Namespace: localenv.KymaNamespace},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: syncRole.Name},
			Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "module-sync", Namespace: localenv.KymaNamespace}}}
		for _, o := range []client.Object{managers, managersBinding, syncRole, syncBinding} {
			Expect(env.KCP().Create(ctx, o)).To(Succeed())
			DeferCleanup(func(ctx SpecContext) { Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, o))).To(Succeed()) })
		}
		as := func(user string) client.Client {
			c, err := ms.KCPAs(user)
			Expect(err).NotTo(HaveOccurred())
			return c
		}

		victim := &v1alpha1.SyncResource{ObjectMeta: metav1.ObjectMeta{Name: "e2e-victim", Namespace: localenv.KymaNamespace, Annotations: writtenBy(ctx, env.KCP())},
			Spec: v1alpha1.SyncResourceSpec{Kyma: localenv.RuntimeID, Module: localenv.SampleModule, Items: []v1alpha1.SyncItem{item("victim", configMapJSON("e2e-victim"))}}}
		Expect(env.KCP().Create(ctx, victim)).To(Succeed())
		DeferCleanup(func(ctx SpecContext) {
			Expect(client.IgnoreNotFound(env.KCP().Delete(ctx, victim))).To(Succeed())
			Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(victim), &v1alpha1.SyncResource{}) }).
				WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
		})
		inRuntime := client.ObjectKey{Namespace: localenv.SKRNamespace, Name: "e2e-victim"}
		finalized := func(g Gomega) *v1alpha1.SyncResource {
			got := &v1alpha1.SyncResource{}
			g.Expect(env.KCP().Get(ctx, client.ObjectKeyFromObject(victim), got)).To(Succeed())
			g.Expect(got.Finalizers).To(ContainElement(syncresources.Finalizer))
			g.Expect(got.DeletionTimestamp).To(BeNil())
			return got
		}
		Eventually(func(g Gomega) {
			finalized(g)
			g.Expect(env.SKR().Get(ctx, inRuntime, &corev1.ConfigMap{})).To(Succeed())
		}).WithTimeout(within).Should(Succeed(), "module-sync did not apply the victim")
		// RBAC takes a new Role up a moment after it was created.
		for _, u := range []string{stranger, granted, syncer} {
			Eventually(func() error { return as(u).Get(ctx, client.ObjectKeyFromObject(victim), &v1alpha1.SyncResource{}) }).
				WithTimeout(within).Should(Succeed(), "%s may not read SyncResources", u)
		}

		By("a manager no grant names: delete and finalizer changes refused")
		notGranted := func(what string) string {
			return "user " + stranger + " may not " + what + " of module sample: no ModuleGrant kcp-system/sample names it"
		}
		err = as(stranger).Delete(ctx, victim.DeepCopy())
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "delete of module sample's SyncResource: %v", err)
		Expect(err.Error()).To(ContainSubstring(notGranted("delete SyncResources")))
		// An update of the current object (retried when module-sync's
		// status write came between).
		unfinalize := func(user string) error {
			var err error
			Eventually(func(g Gomega) {
				got := finalized(g)
				got.Finalizers = nil
				err = as(user).Update(ctx, got)
				g.Expect(apierrors.IsConflict(err)).To(BeFalse())
			}).WithTimeout(within).Should(Succeed())
			return err
		}
		err = unfinalize(stranger)
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "finalizer stripped by an update: %v", err)
		Expect(err.Error()).To(ContainSubstring(notGranted("change the finalizers of SyncResources")))
		err = as(stranger).Patch(ctx, victim.DeepCopy(), client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`)))
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "finalizer stripped by a merge patch: %v", err)
		err = as(stranger).DeleteAllOf(ctx, &v1alpha1.SyncResource{}, client.InNamespace(localenv.KymaNamespace), client.MatchingFields{"metadata.name": victim.Name})
		Expect(apierrors.IsForbidden(err)).To(BeTrue(), "a delete of the collection: %v", err)
		finalized(Default)
		Expect(env.SKR().Get(ctx, inRuntime, &corev1.ConfigMap{})).To(Succeed(), "what the victim created left the runtime")

		By("module-sync, as its production Role lets it, takes its finalizer off (and puts it back)")
		Expect(unfinalize(syncer)).To(Succeed(), "module-sync's identity may not remove its finalizer")
		Eventually(finalized).WithTimeout(within).Should(Not(BeNil()), "module-sync did not put its finalizer back")

		By("the module's own manager takes the finalizer off and deletes: what the victim created leaves the runtime")
		Expect(unfinalize(granted)).To(Succeed(), "the granted manager may not change the finalizers")
		Eventually(finalized).WithTimeout(within).Should(Not(BeNil()))
		Expect(as(granted).Delete(ctx, victim.DeepCopy())).To(Succeed())
		Eventually(func() bool { return apierrors.IsNotFound(env.SKR().Get(ctx, inRuntime, &corev1.ConfigMap{})) }).
			WithTimeout(within).Should(BeTrue(), "module-sync left the deleted SyncResource's ConfigMap in the runtime")
		Eventually(func() error { return env.KCP().Get(ctx, client.ObjectKeyFromObject(victim), &v1alpha1.SyncResource{}) }).
			WithTimeout(within).Should(Satisfy(apierrors.IsNotFound))
	})

	It("refuses retargeting a SyncResource's spec.kyma to another runtime", func(ctx SpecContext) {
		sr := &v1alpha1.SyncResource{}
		Expect(env.KCP().Get(ctx, localenv.SampleModuleConfig(), sr)).To(Succeed())
		sr.Spec.Kyma = "another-runtime"
		err := env.KCP().Update(ctx, sr)
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "retarget: %v", err)
		Expect(err.Error()).To(ContainSubstring("spec.kyma is immutable"))
	})

	It("takes the module name from its configuration, not from the SKR's Kind", func(ctx SpecContext) {
		// The SKR owner re-creates the Module CRD (its Kind is immutable)
		// with the Kind of another module; module-sync keeps mirroring the
		// configured resource as module "sample".
		key := client.ObjectKey{Name: localenv.SampleGVR.GroupResource().String()}
		replace := func(ctx context.Context, mutate func(*apiextensionsv1.CustomResourceDefinition)) {
			old := &apiextensionsv1.CustomResourceDefinition{}
			Expect(env.SKR().Get(ctx, key, old)).To(Succeed())
			Expect(env.SKR().Delete(ctx, old)).To(Succeed())
			Eventually(func() bool {
				return apierrors.IsNotFound(env.SKR().Get(ctx, key, &apiextensionsv1.CustomResourceDefinition{}))
			}).
				WithTimeout(time.Minute).Should(BeTrue())
			crd := &apiextensionsv1.CustomResourceDefinition{ObjectMeta: metav1.ObjectMeta{Name: old.Name}, Spec: old.Spec}
			mutate(crd)
			Expect(env.SKR().Create(ctx, crd)).To(Succeed())
			Eventually(func(g Gomega) {
				got := &apiextensionsv1.CustomResourceDefinition{}
				g.Expect(env.SKR().Get(ctx, key, got)).To(Succeed())
				g.Expect(got.Status.AcceptedNames.Kind).To(Equal(crd.Spec.Names.Kind))
			}).WithTimeout(time.Minute).Should(Succeed())
		}
		original := &apiextensionsv1.CustomResourceDefinition{}
		Expect(env.SKR().Get(ctx, key, original)).To(Succeed())
		replace(ctx, func(crd *apiextensionsv1.CustomResourceDefinition) {
			crd.Spec.Names.Kind, crd.Spec.Names.ListKind, crd.Spec.Names.Singular = "Serverless", "ServerlessList", "serverless"
		})
		DeferCleanup(func(ctx SpecContext) {
			replace(ctx, func(crd *apiextensionsv1.CustomResourceDefinition) { crd.Spec.Names = original.Spec.Names })
			Eventually(func() error { return ms.SetSample(ctx, "restored", 1) }).WithTimeout(within).Should(Succeed())
		})

		greeting := fmt.Sprintf("spoofed-%d", time.Now().UnixNano())
		cr := &unstructured.Unstructured{Object: map[string]any{"spec": map[string]any{"greeting": greeting}}}
		cr.SetAPIVersion(localenv.SampleGVR.GroupVersion().String())
		cr.SetKind("Serverless")
		cr.SetNamespace(localenv.SKRNamespace)
		cr.SetName("default")
		Eventually(func() error { return env.SKR().Create(ctx, cr) }).WithTimeout(within).Should(Succeed())
		Eventually(func(g Gomega) {
			mc := &v1alpha1.ModuleConfig{}
			g.Expect(env.KCP().Get(ctx, localenv.SampleModuleConfig(), mc)).To(Succeed())
			g.Expect(string(mc.Spec.Resource.Raw)).To(ContainSubstring(greeting))
			g.Expect(mc.Spec.Module).To(Equal(localenv.SampleModule))
		}).WithTimeout(2 * time.Minute).Should(Succeed())
		list := &v1alpha1.ModuleConfigList{}
		Expect(env.KCP().List(ctx, list, client.InNamespace(localenv.KymaNamespace))).To(Succeed())
		for _, mc := range list.Items {
			Expect(mc.Spec.Module).NotTo(Equal("serverless"), "ModuleConfig %s", mc.Name)
			Expect(mc.Labels[mirror.LabelModuleName]).NotTo(Equal("serverless"), "ModuleConfig %s", mc.Name)
		}
	})
})

// writtenBy is the annotation every SyncResource carries (the writer
// policy of manifests/kcp): c's own user name, which module-sync of the
// local environment takes as a platform writer (--platform-writers).
func writtenBy(ctx context.Context, c client.Client) map[string]string {
	self := &authenticationv1.SelfSubjectReview{}
	Expect(c.Create(ctx, self)).To(Succeed())
	return map[string]string{v1alpha1.AnnotationWrittenBy: self.Status.UserInfo.Username}
}
