package bundle_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/api/v1beta2"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
	"github.com/seed-c8be168e/runtime-watcher/vs-controller/routeowner"
)

func watcher(ns, name, manager string, field v1beta2.FieldName, labels map[string]string) v1beta2.Watcher {
	return v1beta2.Watcher{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: v1beta2.WatcherSpec{
			Manager:         manager,
			ServiceInfo:     v1beta2.Service{Name: "listener", Namespace: "kcp-system", Port: 8082},
			LabelsToWatch:   labels,
			ResourceToWatch: v1beta2.WatchableGVR{Group: "operator.kyma-project.io", Version: "*", Resource: "kymas"},
			Field:           field,
		},
	}
}

func TestDeployment(t *testing.T) {
	d, err := bundle.Deployment(bundle.Options{Namespace: "skr-ns", Image: "registry/skr-webhook:v1", KCPAddr: "gw.kcp.example:443"})
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != bundle.Name || d.Namespace != "skr-ns" {
		t.Fatalf("deployment %s/%s", d.Namespace, d.Name)
	}
	c := d.Spec.Template.Spec.Containers[0]
	if c.Image != "registry/skr-webhook:v1" {
		t.Fatalf("image %q", c.Image)
	}
	for _, want := range []string{
		"--tls-cert-file=/etc/skr-webhook/tls/tls.crt", "--tls-key-file=/etc/skr-webhook/tls/tls.key",
		"--ca-file=/etc/skr-webhook/tls/ca.crt", "--kcp-addr=gw.kcp.example:443", "--listen-addr=:8443",
		"--managers-file=/etc/skr-webhook/managers/managers",
	} {
		if !slices.Contains(c.Args, want) {
			t.Errorf("args %v lack %s", c.Args, want)
		}
	}
	if n := slices.IndexFunc(c.Args, func(a string) bool { return strings.HasPrefix(a, "--kcp-addr=") }); slices.IndexFunc(c.Args[n+1:], func(a string) bool { return strings.HasPrefix(a, "--kcp-addr=") }) >= 0 {
		t.Errorf("--kcp-addr given twice: %v", c.Args)
	}
	if !slices.Contains(c.Args, "--min-tls-version=1.2") {
		t.Errorf("args %v lack the manifest's --min-tls-version=1.2", c.Args)
	}
	d13, err := bundle.Deployment(bundle.Options{KCPAddr: "gw.kcp.example:443", MinTLSVersion: "1.3"})
	if err != nil {
		t.Fatal(err)
	}
	if args := d13.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--min-tls-version=1.3") || slices.Contains(args, "--min-tls-version=1.2") {
		t.Errorf("MinTLSVersion 1.3: args %v", args)
	}
	// The Deployment mounts the Secret and the managers ConfigMap the
	// bundle writes, where the flags point.
	vols := d.Spec.Template.Spec.Volumes
	if len(vols) != 2 || vols[0].Secret == nil || vols[0].Secret.SecretName != bundle.SecretName ||
		vols[1].ConfigMap == nil || vols[1].ConfigMap.Name != bundle.ManagersConfigMapName {
		t.Fatalf("volumes %+v do not mount %s and %s", vols, bundle.SecretName, bundle.ManagersConfigMapName)
	}
	mounts := map[string]string{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	if mounts["tls"] != "/etc/skr-webhook/tls" || mounts["managers"] != "/etc/skr-webhook/managers" {
		t.Fatalf("mounts %v", mounts)
	}
	// Delivery (docs/architecture.md §4.8): 2 replicas spread over nodes, a
	// preStop without a shell, a grace period above preStop + drain.
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Fatalf("replicas %v", d.Spec.Replicas)
	}
	aa := d.Spec.Template.Spec.Affinity
	if aa == nil || aa.PodAntiAffinity == nil || len(aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution) != 1 ||
		aa.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution[0].PodAffinityTerm.TopologyKey != "kubernetes.io/hostname" {
		t.Fatalf("anti-affinity %+v", aa)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil || c.Lifecycle.PreStop.Exec != nil {
		t.Fatalf("preStop %+v: want the kubelet's sleep action (no shell in the image)", c.Lifecycle)
	}
	drain := 0
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--drain-timeout="); ok {
			dur, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			drain = int(dur.Seconds())
		}
	}
	grace := d.Spec.Template.Spec.TerminationGracePeriodSeconds
	if drain == 0 || grace == nil || *grace <= int64(drain)+c.Lifecycle.PreStop.Sleep.Seconds {
		t.Fatalf("terminationGracePeriodSeconds %v not above preStop %ds + --drain-timeout %ds", grace, c.Lifecycle.PreStop.Sleep.Seconds, drain)
	}
	sc := c.SecurityContext
	if sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || d.Spec.Template.Spec.SecurityContext.RunAsNonRoot == nil || !*d.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Fatal("not non-root with a read-only root filesystem")
	}
	for _, p := range []*corev1.Probe{c.LivenessProbe, c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port != intstr.FromString("health") {
			t.Fatalf("probe %+v", p)
		}
	}
	health := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "health" })
	if health < 0 || c.Ports[health].ContainerPort != 8081 {
		t.Fatalf("health port %+v", c.Ports)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Fatal("probe paths")
	}

	// Defaults: the manifest's image and placeholder address.
	d2, err := bundle.Deployment(bundle.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if d2.Namespace != bundle.DefaultNamespace || d2.Spec.Template.Spec.Containers[0].Image == "" {
		t.Fatalf("defaults: %s %q", d2.Namespace, d2.Spec.Template.Spec.Containers[0].Image)
	}
}

func TestServiceAndNamespace(t *testing.T) {
	svc, err := bundle.Service(bundle.Options{Namespace: "skr-ns"})
	if err != nil {
		t.Fatal(err)
	}
	d, _ := bundle.Deployment(bundle.Options{})
	if svc.Name != bundle.Name || svc.Namespace != "skr-ns" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != bundle.ServicePort {
		t.Fatalf("service %+v", svc)
	}
	// The Service selects the Deployment's pods and targets its webhook port.
	for k, v := range svc.Spec.Selector {
		if d.Spec.Template.Labels[k] != v {
			t.Fatalf("selector %v does not select pod labels %v", svc.Spec.Selector, d.Spec.Template.Labels)
		}
	}
	target := svc.Spec.Ports[0].TargetPort.StrVal
	c := d.Spec.Template.Spec.Containers[0]
	if i := slices.IndexFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == target }); i < 0 || c.Ports[i].ContainerPort != 8443 {
		t.Fatalf("target port %q is not the container's 8443", target)
	}
	ns, err := bundle.Namespace(bundle.Options{Namespace: "skr-ns"})
	if err != nil || ns.Name != "skr-ns" {
		t.Fatalf("namespace %v %v", ns, err)
	}
	if got := (bundle.Options{Namespace: "skr-ns"}).ServiceDNSNames(); !slices.Equal(got, []string{"skr-webhook.skr-ns.svc", "skr-webhook.skr-ns.svc.cluster.local"}) {
		t.Fatalf("service DNS names %v", got)
	}
}

func TestSecret(t *testing.T) {
	s := bundle.Secret(bundle.Options{}, []byte("ca"), []byte("crt"), []byte("key"))
	if s.Name != "skr-webhook-tls" || s.Namespace != "kyma-system" || s.Type != corev1.SecretTypeTLS ||
		string(s.Data["ca.crt"]) != "ca" || string(s.Data["tls.crt"]) != "crt" || string(s.Data["tls.key"]) != "key" {
		t.Fatalf("secret %+v", s)
	}
}

func TestWebhook(t *testing.T) {
	ca := []byte("-----BEGIN CERTIFICATE-----")
	for _, tc := range []struct {
		name     string
		opts     bundle.Options
		w        v1beta2.Watcher
		resource string
		selector map[string]string
		url      string
	}{
		{"spec via service", bundle.Options{Namespace: "skr-ns"}, watcher("kcp-system", "lm", "lifecycle-manager", v1beta2.SpecField, nil), "kymas", nil, ""},
		{"status subresource", bundle.Options{}, watcher("kcp-system", "lm", "lifecycle-manager", v1beta2.StatusField, nil), "kymas/status", nil, ""},
		{"labels to watch", bundle.Options{}, watcher("kcp-system", "lm", "lifecycle-manager", v1beta2.SpecField, map[string]string{"a": "b"}), "kymas", map[string]string{"a": "b"}, ""},
		{"local URL", bundle.Options{WebhookURL: "https://localhost:18443/"}, watcher("kcp-system", "lm", "lifecycle-manager", v1beta2.SpecField, nil), "kymas", nil, "https://localhost:18443/validate/lifecycle-manager"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := bundle.Webhook(tc.opts, &tc.w, ca)
			if h.Name != "kcp-system.lm.operator.kyma-project.io" {
				t.Errorf("name %q", h.Name)
			}
			if len(h.Rules) != 1 || !slices.Equal(h.Rules[0].Resources, []string{tc.resource}) ||
				!slices.Equal(h.Rules[0].APIGroups, []string{"operator.kyma-project.io"}) || !slices.Equal(h.Rules[0].APIVersions, []string{"*"}) ||
				!slices.Equal(h.Rules[0].Operations, []admissionregistrationv1.OperationType{"CREATE", "UPDATE", "DELETE"}) {
				t.Errorf("rules %+v", h.Rules)
			}
			if tc.selector == nil && h.ObjectSelector != nil || tc.selector != nil && (h.ObjectSelector == nil || fmt.Sprint(h.ObjectSelector.MatchLabels) != fmt.Sprint(tc.selector)) {
				t.Errorf("objectSelector %+v", h.ObjectSelector)
			}
			if *h.FailurePolicy != admissionregistrationv1.Ignore || *h.SideEffects != admissionregistrationv1.SideEffectClassNoneOnDryRun ||
				*h.TimeoutSeconds != bundle.DefaultTimeoutSeconds || !slices.Equal(h.AdmissionReviewVersions, []string{"v1"}) {
				t.Errorf("policy fields %+v", h)
			}
			if string(h.ClientConfig.CABundle) != string(ca) {
				t.Errorf("caBundle %q", h.ClientConfig.CABundle)
			}
			path := contract.ValidatePath("lifecycle-manager")
			switch {
			case tc.url != "":
				if h.ClientConfig.URL == nil || *h.ClientConfig.URL != tc.url || h.ClientConfig.Service != nil {
					t.Errorf("clientConfig %+v", h.ClientConfig)
				}
			default:
				s := h.ClientConfig.Service
				ns := tc.opts.Namespace
				if ns == "" {
					ns = bundle.DefaultNamespace
				}
				if h.ClientConfig.URL != nil || s == nil || s.Name != bundle.Name || s.Namespace != ns || *s.Path != path || *s.Port != 443 {
					t.Errorf("clientConfig %+v", h.ClientConfig)
				}
			}
		})
	}
}

func TestWebhookConfiguration(t *testing.T) {
	deleting := watcher("b", "deleting", "m", v1beta2.SpecField, nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	byLabel := watcher("a", "by-label", "", v1beta2.SpecField, nil)
	byLabel.Labels = map[string]string{contract.LabelManagedBy: "from-label"}
	// The CRD accepts an empty resource (as Lifecycle Manager's does); its
	// webhook would make the whole configuration invalid.
	noResource := watcher("a", "no-resource", "m3", v1beta2.SpecField, nil)
	noResource.Spec.ResourceToWatch.Resource = ""
	ws := []v1beta2.Watcher{
		watcher("z", "last", "m1", v1beta2.SpecField, nil),
		deleting,
		watcher("a", "no-manager", "", v1beta2.SpecField, nil),
		watcher("a", "bad-manager", "Not_A_Label", v1beta2.SpecField, nil),
		byLabel,
		noResource,
		watcher("a", "first", "m2", v1beta2.StatusField, nil),
	}
	vwc := bundle.WebhookConfiguration(bundle.Options{}, ws, []byte("ca"))
	if vwc.Name != "skr-webhook" {
		t.Fatalf("name %q", vwc.Name)
	}
	var names []string
	for _, h := range vwc.Webhooks {
		names = append(names, h.Name)
	}
	want := []string{"a.by-label.operator.kyma-project.io", "a.first.operator.kyma-project.io", "z.last.operator.kyma-project.io"}
	if !slices.Equal(names, want) {
		t.Fatalf("webhooks %v, want %v", names, want)
	}
	if p := *vwc.Webhooks[0].ClientConfig.Service.Path; p != "/validate/from-label" {
		t.Fatalf("managed-by label not used: %s", p)
	}
	if got := bundle.WebhookConfiguration(bundle.Options{}, nil, nil); len(got.Webhooks) != 0 {
		t.Fatal("webhooks without watchers")
	}
}

// A Watcher that loses its manager's route to an older one gets no webhook
// (docs/architecture.md §4.10): its rules would post to the owner's path.
// Younger Watchers of the manager get one only while routing says they
// hold a route of their own (other Gateways) for their current spec.
func TestWebhookConfigurationRouteOwner(t *testing.T) {
	at := func(w v1beta2.Watcher, sec int64) v1beta2.Watcher {
		w.CreationTimestamp = metav1.Unix(1700000000+sec, 0)
		w.Generation = 1
		return w
	}
	holds := func(w v1beta2.Watcher, generation int64) v1beta2.Watcher {
		w.Status.Conditions = []metav1.Condition{{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionTrue, Reason: routeowner.ReasonApplied, ObservedGeneration: generation}}
		return w
	}
	owner := at(watcher("team-a", "owner", "shared", v1beta2.SpecField, nil), 0)
	loser := at(watcher("team-x", "loser", "shared", v1beta2.SpecField, nil), 1)
	loser.Spec.ResourceToWatch = v1beta2.WatchableGVR{Group: "*", Version: "*", Resource: "*"}
	loser.Status.Conditions = []metav1.Condition{{Type: routeowner.ConditionVirtualService, Status: metav1.ConditionFalse, Reason: routeowner.ReasonRouteConflict, ObservedGeneration: 1}}
	ownGateways := holds(at(watcher("team-b", "own-gateways", "shared", v1beta2.SpecField, nil), 2), 1)
	stale := at(watcher("team-c", "stale", "shared", v1beta2.SpecField, nil), 3)
	stale.Generation = 2
	stale = holds(stale, 1) // held a route for its spec before
	names := func(ws ...v1beta2.Watcher) []string {
		var out []string
		for _, h := range bundle.WebhookConfiguration(bundle.Options{}, ws, nil).Webhooks {
			out = append(out, h.Name)
		}
		return out
	}
	if got, want := names(loser, owner, ownGateways, stale), []string{"team-a.owner.operator.kyma-project.io", "team-b.own-gateways.operator.kyma-project.io"}; !slices.Equal(got, want) {
		t.Errorf("webhooks %v, want %v", got, want)
	}
	if got := bundle.Managers([]v1beta2.Watcher{loser, owner}); !slices.Equal(got, []string{"shared"}) {
		t.Errorf("managers %v", got)
	}
	// The owner keeps its route while it is being deleted.
	owner.DeletionTimestamp = &metav1.Time{}
	if got := names(owner, loser); len(got) != 0 {
		t.Errorf("webhooks %v while the owner is being deleted, want none", got)
	}
	// Gone: the route goes to the next claimant.
	if got, want := names(loser), []string{"team-x.loser.operator.kyma-project.io"}; !slices.Equal(got, want) {
		t.Errorf("webhooks %v after the owner is gone, want %v", got, want)
	}
}

// One Watcher's webhook in the runtime's ValidatingWebhookConfiguration.
func ExampleWebhook() {
	w := watcher("kcp-system", "lifecycle-manager", "lifecycle-manager", v1beta2.SpecField, map[string]string{"operator.kyma-project.io/watched-by": "lifecycle-manager"})
	h := bundle.Webhook(bundle.Options{}, &w, []byte("<ca.crt>"))
	fmt.Println(h.Name)
	fmt.Println(h.ClientConfig.Service.Namespace+"/"+h.ClientConfig.Service.Name, *h.ClientConfig.Service.Path)
	fmt.Println(h.Rules[0].Operations, h.Rules[0].Resources, *h.FailurePolicy, *h.SideEffects)
	// Output:
	// kcp-system.lifecycle-manager.operator.kyma-project.io
	// kyma-system/skr-webhook /validate/lifecycle-manager
	// [CREATE UPDATE DELETE] [kymas] Ignore NoneOnDryRun
}

func TestDeliveryObjects(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns"}
	pdb, err := bundle.PodDisruptionBudget(o)
	if err != nil {
		t.Fatal(err)
	}
	d, err := bundle.Deployment(o)
	if err != nil {
		t.Fatal(err)
	}
	if pdb.Name != bundle.Name || pdb.Namespace != "skr-ns" || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Fatalf("pdb %+v", pdb)
	}
	sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || !sel.Matches(labels.Set(d.Spec.Template.Labels)) {
		t.Fatalf("the PDB's selector %v does not select the Deployment's pods %v", pdb.Spec.Selector, d.Spec.Template.Labels)
	}

	deleting := watcher("kcp-system", "gone", "gone-manager", v1beta2.SpecField, nil)
	deleting.DeletionTimestamp = &metav1.Time{}
	deletingBeats := watcher("kcp-system", "gone-beats", "zeta", v1beta2.SpecField, nil)
	deletingBeats.DeletionTimestamp = &metav1.Time{}
	deletingBeats.Spec.Heartbeats = true
	// Younger than w2, so w2 holds the manager zeta (Webhooked).
	deletingBeats.CreationTimestamp = metav1.NewTime(time.Unix(1, 0))
	ws := []v1beta2.Watcher{
		watcher("kcp-system", "w2", "zeta", v1beta2.SpecField, nil),
		watcher("kcp-system", "w1", "lifecycle-manager", v1beta2.SpecField, nil),
		watcher("other", "w3", "lifecycle-manager", v1beta2.StatusField, nil), // same manager: one line
		deleting,
		deletingBeats, // not usable: its opt-in does not count
	}
	cm := bundle.ManagersConfigMap(o, ws)
	if cm.Name != bundle.ManagersConfigMapName || cm.Namespace != "skr-ns" {
		t.Fatalf("configmap %s/%s", cm.Namespace, cm.Name)
	}
	if got := cm.Data[bundle.ManagersKey]; got != "lifecycle-manager\nzeta\n" {
		t.Fatalf("managers file %q: heartbeats are opt-in", got)
	}
	// A Watcher that lost its manager's route (w3: w1 is older) cannot
	// turn heartbeats on for the owner's operator.
	ws[2].Spec.Heartbeats = true
	if got := bundle.ManagersConfigMap(o, ws).Data[bundle.ManagersKey]; got != "lifecycle-manager\nzeta\n" {
		t.Fatalf("managers file %q: a conflict loser opted the owner in", got)
	}
	// The Watcher that holds the manager's route opting in is enough.
	ws[1].Spec.Heartbeats = true
	if got := bundle.ManagersConfigMap(o, ws).Data[bundle.ManagersKey]; got != "lifecycle-manager heartbeats\nzeta\n" {
		t.Fatalf("managers file %q", got)
	}
	if got := bundle.ManagersConfigMap(o, nil).Data[bundle.ManagersKey]; got != "" {
		t.Fatalf("no Watchers: %q", got)
	}
}
