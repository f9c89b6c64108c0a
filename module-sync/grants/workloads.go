package grants

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strings"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
)

// The workload policy module-sync keeps in every runtime (WorkloadPolicy):
// a module's Pods and pod templates may use only what its grant names.
const (
	// WorkloadParamsNamespace and WorkloadParamsName name the policy's
	// parameter ConfigMap: in kube-system, which no module is ever
	// granted.
	WorkloadParamsNamespace = "kube-system"
	WorkloadParamsName      = "kyma-project.io--module-workloads"
	// WorkloadPolicyName is the policy's name (workloads-policy.yaml): the
	// runtime's API server names it in every refusal.
	WorkloadPolicyName = "module-workloads.operator.kyma-project.io"
)

//go:embed workloads-policy.yaml
var workloadPolicyYAML []byte

// ProbeUser is the runtime user whose dry-run Pod shows that the runtime's
// API server enforces the workload policy (PolicyActive). "probe." is no
// module name (a module name has no dot), so no module acts as it.
const ProbeUser = UserPrefix + "probe."

// probeName names the probe user's ClusterRole and RoleBinding, and its
// dry-run Pod; probeNamespace is where it may create Pods (dry-run only:
// module-sync never sends it otherwise).
const (
	probeName      = "kyma-project.io--module-sync-workload-probe"
	probeNamespace = "default"
)

// ErrWorkloadPolicyInactive: the runtime's API server does not enforce the
// workload policy yet (just written: its admission takes it up within
// moments). Nothing is written as a module's user until it does.
var ErrWorkloadPolicyInactive = errors.New("the runtime does not enforce the module workload policy yet")

// PolicyActive returns nil once the runtime's API server refuses, for the
// probe user (probe acts as ProbeUser), a dry-run Pod that mounts the
// bundle's Secret — the policy is in effect there — and remembers that per
// runtimeKey and probe client; ErrWorkloadPolicyInactive (wrapped) while the runtime answers
// otherwise, and the transport's error when it does not answer.
func (r *Renderer) PolicyActive(ctx context.Context, probe client.Client, runtimeKey string) error {
	r.mu.Lock()
	ok := r.active[runtimeKey] == probe
	r.mu.Unlock()
	if ok {
		return nil
	}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: probeName, Namespace: probeNamespace},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "probe", Image: "probe"}},
			Volumes: []corev1.Volume{{Name: "bundle", VolumeSource: corev1.VolumeSource{
				Secret: &corev1.SecretVolumeSource{SecretName: skr.SecretName}}}},
		}}
	err := probe.Create(ctx, pod, client.DryRunAll)
	switch {
	case err == nil:
		return fmt.Errorf("%w: a Pod of the probe user mounting %s was admitted", ErrWorkloadPolicyInactive, skr.SecretName)
	case apierrors.IsForbidden(err) && strings.Contains(err.Error(), "may not use the Secrets"):
		r.mu.Lock()
		if r.active == nil {
			r.active = map[string]client.Client{}
		}
		r.active[runtimeKey] = probe
		r.mu.Unlock()
		return nil
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return err // the runtime did not answer: the caller's unreachable runtime
	}
	return fmt.Errorf("%w: %w", ErrWorkloadPolicyInactive, err)
}

// WorkloadPolicy is the ValidatingAdmissionPolicy and its binding that
// module-sync keeps in every runtime (two YAML documents, embedded).
func WorkloadPolicy() (*admissionregistrationv1.ValidatingAdmissionPolicy, *admissionregistrationv1.ValidatingAdmissionPolicyBinding, error) {
	docs := strings.Split(string(workloadPolicyYAML), "\n---\n")
	if len(docs) != 2 {
		return nil, nil, fmt.Errorf("workloads-policy.yaml: want the policy and its binding, got %d documents", len(docs))
	}
	p, b := &admissionregistrationv1.ValidatingAdmissionPolicy{}, &admissionregistrationv1.ValidatingAdmissionPolicyBinding{}
	if err := yaml.UnmarshalStrict([]byte(docs[0]), p); err != nil {
		return nil, nil, fmt.Errorf("workloads-policy.yaml: %w", err)
	}
	if err := yaml.UnmarshalStrict([]byte(docs[1]), b); err != nil {
		return nil, nil, fmt.Errorf("workloads-policy.yaml: %w", err)
	}
	if p.Name != WorkloadPolicyName {
		return nil, nil, fmt.Errorf("workloads-policy.yaml: the policy is %q, want %q", p.Name, WorkloadPolicyName)
	}
	gv := admissionregistrationv1.SchemeGroupVersion.String()
	p.TypeMeta = metav1.TypeMeta{APIVersion: gv, Kind: "ValidatingAdmissionPolicy"}
	b.TypeMeta = metav1.TypeMeta{APIVersion: gv, Kind: "ValidatingAdmissionPolicyBinding"}
	return p, b, nil
}

// workloadEntry is the grant's part of the policy's parameter ConfigMap:
// the keys "<module>.secrets", "<module>.serviceAccounts" (namespace/name,
// comma-separated), "<module>.hostAccess" and "<module>.privileged", each
// present only when it allows something. Names of the watcher bundle are
// left out whatever the grant says.
func workloadEntry(g Grant) map[string]string {
	out := map[string]string{}
	if !g.Found {
		return out
	}
	var namespaces []string
	for _, ns := range g.Spec.Namespaces {
		if !isKubeNamespace(ns) {
			namespaces = append(namespaces, ns)
		}
	}
	qualified := func(names []string) []string {
		var q []string
		for _, n := range names {
			if IsBundleName(n) || n == "" {
				continue
			}
			for _, ns := range namespaces {
				q = append(q, ns+"/"+n)
			}
		}
		return q
	}
	var secrets, accounts []string
	if w := g.Spec.Workloads; w != nil {
		secrets = qualified(w.Secrets)
		accounts = qualified(w.ServiceAccounts)
		if w.HostAccess {
			out[g.Module+".hostAccess"] = "true"
		}
		if w.Privileged {
			out[g.Module+".privileged"] = "true"
		}
	}
	for _, sa := range g.ServiceAccounts {
		ns, name, ok := strings.Cut(sa, "/")
		if ok && !isKubeNamespace(ns) && !IsBundleName(name) {
			accounts = append(accounts, sa)
		}
	}
	put := func(key string, list []string) {
		if len(list) == 0 {
			return
		}
		sort.Strings(list)
		uniq := list[:1]
		for _, s := range list[1:] {
			if s != uniq[len(uniq)-1] {
				uniq = append(uniq, s)
			}
		}
		out[key] = strings.Join(uniq, ",")
	}
	put(g.Module+".secrets", secrets)
	put(g.Module+".serviceAccounts", accounts)
	return out
}

// ensureWorkloads writes the policy, its binding and the grant's entry in
// the parameter ConfigMap with the runtime's admin client. The entry is
// applied by the module's own field manager, so each module's apply owns
// (and removes) only its own keys.
func ensureWorkloads(ctx context.Context, admin client.Client, g Grant) error {
	p, b, err := WorkloadPolicy()
	if err != nil {
		return err
	}
	rbac := func(kind string) metav1.TypeMeta {
		return metav1.TypeMeta{APIVersion: rbacv1.SchemeGroupVersion.String(), Kind: kind}
	}
	labels := map[string]string{LabelManagedBy: ManagedBy}
	probeRole := &rbacv1.ClusterRole{TypeMeta: rbac("ClusterRole"), ObjectMeta: metav1.ObjectMeta{Name: probeName, Labels: labels},
		Rules: []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"create"}}}}
	probeBinding := &rbacv1.RoleBinding{TypeMeta: rbac("RoleBinding"), ObjectMeta: metav1.ObjectMeta{Name: probeName, Namespace: probeNamespace, Labels: labels},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: ProbeUser}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: probeName}}
	for _, o := range []client.Object{p, b, probeRole, probeBinding} {
		if err := apply(ctx, admin, o, fieldManager); err != nil {
			return fmt.Errorf("write %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
		}
	}
	cm := &corev1.ConfigMap{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: WorkloadParamsName, Namespace: WorkloadParamsNamespace,
			Labels: map[string]string{LabelManagedBy: ManagedBy}},
		Data: workloadEntry(g),
	}
	if err := apply(ctx, admin, cm, fieldManager+"."+g.Module); err != nil {
		return fmt.Errorf("write the workload entry of module %s: %w", g.Module, err)
	}
	return nil
}

// IsWorkloadRefusal says whether err is the runtime's API server refusing a
// write because the workload policy denied it: the module's grant does not
// cover what the workload uses.
func IsWorkloadRefusal(err error) bool {
	return apierrors.IsForbidden(err) && strings.Contains(err.Error(), "'"+WorkloadPolicyName+"'")
}
