package bundle_test

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/seed-c8be168e/runtime-watcher/vs-controller/bundle"
)

func TestNetworkPolicy(t *testing.T) {
	o := bundle.Options{Namespace: "skr-ns", KCPAddr: "kcp.example.com"}
	np, err := bundle.NetworkPolicy(o)
	if err != nil {
		t.Fatal(err)
	}
	if np.Name != bundle.NetworkPolicyName || np.Namespace != "skr-ns" {
		t.Fatalf("%s/%s", np.Namespace, np.Name)
	}
	if !slices.Equal(np.Spec.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}) {
		t.Errorf("policyTypes %v: both directions must be confined", np.Spec.PolicyTypes)
	}

	// It confines the webhook pods, ours and the take-over's.
	sel := labels.SelectorFromSet(np.Spec.PodSelector.MatchLabels)
	dep, err := bundle.Deployment(o)
	if err != nil {
		t.Fatal(err)
	}
	takeover, err := bundle.TakeoverDeployment(o)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"skr-webhook", "take-over"} {
		tpl := dep.Spec.Template
		if d == "take-over" {
			tpl = takeover.Spec.Template
		}
		if !sel.Matches(labels.Set(tpl.Labels)) {
			t.Errorf("the policy does not select the %s pods (%v)", d, tpl.Labels)
		}
	}

	// Ingress: the admission port (the Service's target), from anywhere by
	// default; the probes' port; nothing else.
	ports := map[string]int32{}
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		ports[p.Name] = p.ContainerPort
	}
	svc, err := bundle.Service(o)
	if err != nil {
		t.Fatal(err)
	}
	in := np.Spec.Ingress[0]
	if len(in.Ports) != 1 || *in.Ports[0].Port != svc.Spec.Ports[0].TargetPort || ports[in.Ports[0].Port.StrVal] == 0 {
		t.Errorf("first ingress rule %+v: want the webhook port %v (a named port of the container)", in.Ports, svc.Spec.Ports[0].TargetPort)
	}
	if in.From != nil {
		t.Errorf("default sources %v, want any", in.From)
	}
	var open []string
	for _, r := range np.Spec.Ingress[1:] {
		if r.From != nil {
			t.Errorf("rule %+v: want from anywhere", r)
		}
		for _, p := range r.Ports {
			open = append(open, p.Port.String())
		}
	}
	if !slices.Equal(open, []string{"2112", "health"}) || ports["health"] == 0 {
		t.Errorf("other open ports %v, want metrics (2112) and health", open)
	}

	// Egress: the KCP gateway's port and DNS only.
	if got := np.Spec.Egress[0]; len(got.To) != 0 || len(got.Ports) != 1 || *got.Ports[0].Port != intstr.FromInt32(443) {
		t.Errorf("KCP egress %+v, want TCP 443 anywhere", got)
	}
	for _, r := range np.Spec.Egress[1:] {
		for _, p := range r.Ports {
			if p.Port.IntVal != 53 && p.Port.IntVal != 8053 {
				t.Errorf("egress to port %v: want DNS only", p.Port)
			}
		}
	}

	// Not one of Lifecycle Manager's: a take-over does not remove it.
	if slices.Contains(bundle.LMNetworkPolicyNames, np.Name) || bundle.IsLifecycleManagers(np) {
		t.Error("our NetworkPolicy would pass for Lifecycle Manager's")
	}
	for _, ref := range bundle.LifecycleManagerObjects(o) {
		if ref.GVK == bundle.NetworkPolicyGVK && ref.Key.Name == np.Name {
			t.Errorf("the take-over removes %s", ref.Key)
		}
	}
}

func TestNetworkPolicyKCPPort(t *testing.T) {
	for addr, want := range map[string]int32{"": 443, "kcp.example.com": 443, "kcp.example.com:30443": 30443, "[fd00::1]:9443": 9443} {
		np, err := bundle.NetworkPolicy(bundle.Options{KCPAddr: addr})
		if err != nil {
			t.Errorf("%q: %v", addr, err)
			continue
		}
		if got := np.Spec.Egress[0].Ports[0].Port; *got != intstr.FromInt32(want) {
			t.Errorf("%q: egress port %v, want %d", addr, got, want)
		}
	}
	for _, addr := range []string{"kcp:0", "kcp:65536", "kcp:https", "kcp:-1", "fd00::1"} {
		if _, err := bundle.KCPPort(addr); err == nil {
			t.Errorf("%q accepted", addr)
		}
		if _, err := bundle.NetworkPolicy(bundle.Options{KCPAddr: addr}); err == nil {
			t.Errorf("NetworkPolicy with %q built", addr)
		}
	}
}

// The "gardener" preset admits what Lifecycle Manager's seed-to-watcher
// policy admits (test/fixtures/lifecycle-manager).
func TestIngressFromGardenerIsLifecycleManagers(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "test", "fixtures", "lifecycle-manager", "skr-bundle", "networkpolicy-seed-to-watcher-rendered.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var lm networkingv1.NetworkPolicy
	if err := yaml.UnmarshalStrict(data, &lm); err != nil {
		t.Fatal(err)
	}
	peers, err := bundle.ParseIngressFrom(bundle.IngressFromGardener)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(peers, lm.Spec.Ingress[0].From) {
		t.Errorf("gardener preset %s, Lifecycle Manager admits %s", bundle.FormatIngressFrom(peers), bundle.FormatIngressFrom(lm.Spec.Ingress[0].From))
	}
	np, err := bundle.NetworkPolicy(bundle.Options{WebhookIngressFrom: peers})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(np.Spec.Ingress[0].From, peers) {
		t.Errorf("webhook sources %v, want %v", np.Spec.Ingress[0].From, peers)
	}
	if np.Spec.Ingress[1].From != nil {
		t.Error("the sources reached beyond the webhook's rule")
	}
}

func TestParseIngressFrom(t *testing.T) {
	ok := map[string]int{
		"":         0,
		"  ":       0,
		"gardener": 1,
		`[{"ipBlock":{"cidr":"10.250.0.0/16","except":["10.250.1.0/24"]}}]`:                     1,
		`[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"kube-system"}}}]`: 1,
		`[{"podSelector":{"matchExpressions":[{"key":"app","operator":"In","values":["a","b"]}]}},` +
			`{"ipBlock":{"cidr":"2001:db8::/32"}}]`: 2,
	}
	for in, n := range ok {
		peers, err := bundle.ParseIngressFrom(in)
		if err != nil || len(peers) != n {
			t.Errorf("%q: %d peers, %v; want %d", in, len(peers), err, n)
		}
	}
	many := "[" + strings.Repeat(`{"ipBlock":{"cidr":"10.0.0.0/8"}},`, bundle.MaxIngressPeers) + `{"ipBlock":{"cidr":"10.0.0.0/8"}}]`
	for in, why := range map[string]string{
		"[]":                                     "admits nobody",
		"[{}]":                                   "set podSelector",
		"vpn-shoot":                              "JSON list",
		`{"ipBlock":{"cidr":"10.0.0.0/8"}}`:      "JSON list",
		`[{"ipblock":{"cidr":"10.0.0.0/8"}}]`:    "unknown field",
		`[{"ipBlock":{"cidr":"10.0.0.0/8"}}] []`: "after top-level value",
		`[{"ipBlock":{"cidr":"10.0.0.300/8"}}]`:  "cidr",
		`[{"ipBlock":{"cidr":"10.0.0.0/8","except":["11.0.0.0/16"]}}]`:             "inside",
		`[{"ipBlock":{"cidr":"10.0.0.0/8"},"podSelector":{}}]`:                     "combined",
		`[{"podSelector":{"matchExpressions":[{"key":"app","operator":"Near"}]}}]`: "podSelector",
		many: "at most",
	} {
		if _, err := bundle.ParseIngressFrom(in); err == nil || !strings.Contains(err.Error(), why) {
			t.Errorf("%q: %v, want an error about %q", in, err, why)
		}
	}
}
