package bundle

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	kjson "sigs.k8s.io/json"

	"github.com/seed-c8be168e/runtime-watcher/manifests/skr"
)

// NetworkPolicyName names the skr-webhook's NetworkPolicy; Lifecycle
// Manager's are LMNetworkPolicyNames (removed by a take-over).
const NetworkPolicyName = Name

// DefaultKCPPort is the KCP gateway's port when --kcp-gateway-host has none.
const DefaultKCPPort = 443

// MaxIngressPeers bounds --skr-webhook-ingress-from.
const MaxIngressPeers = 16

// IngressFromGardener is the --skr-webhook-ingress-from preset for Gardener
// shoots: only the vpn-shoot pods, the shoot API server's path into the
// cluster, reach the webhook — the source Lifecycle Manager admits
// (NetworkPolicy kyma-project.io--seed-to-watcher).
const IngressFromGardener = "gardener"

// gardenerPeers are IngressFromGardener's sources.
func gardenerPeers() []networkingv1.NetworkPolicyPeer {
	return []networkingv1.NetworkPolicyPeer{{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"gardener.cloud/purpose": "kube-system"}},
		PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{"app": "vpn-shoot"}},
	}}
}

// ParseIngressFrom reads vs-controller's --skr-webhook-ingress-from: the
// sources that may reach the webhook's admission port. "" means any source
// (the default: the API server is usually outside the pod network);
// IngressFromGardener the vpn-shoot pods; anything else is a JSON list of
// NetworkPolicy peers (podSelector, namespaceSelector, ipBlock), e.g.
// [{"ipBlock":{"cidr":"10.250.0.0/16"}}]. Unknown fields, empty peers,
// invalid selectors or CIDRs, and more than MaxIngressPeers are refused.
func ParseIngressFrom(s string) ([]networkingv1.NetworkPolicyPeer, error) {
	s = strings.TrimSpace(s)
	switch s {
	case "":
		return nil, nil
	case IngressFromGardener:
		return gardenerPeers(), nil
	}
	// Case-sensitive and strict, as the API server decodes: "ipblock" is
	// an unknown field, not ipBlock.
	var peers []networkingv1.NetworkPolicyPeer
	strict, err := kjson.UnmarshalStrict([]byte(s), &peers)
	if err != nil {
		return nil, fmt.Errorf("want %q or a JSON list of NetworkPolicy peers: %w", IngressFromGardener, err)
	}
	if len(strict) > 0 {
		return nil, fmt.Errorf("want a JSON list of NetworkPolicy peers: %w", errors.Join(strict...))
	}
	if len(peers) == 0 {
		return nil, errors.New("an empty list admits nobody; leave the flag empty to admit any source")
	}
	if len(peers) > MaxIngressPeers {
		return nil, fmt.Errorf("%d peers, at most %d", len(peers), MaxIngressPeers)
	}
	for i, p := range peers {
		if err := validPeer(p); err != nil {
			return nil, fmt.Errorf("peer %d: %w", i, err)
		}
	}
	return peers, nil
}

// validPeer checks what the API server's validation would refuse (its
// code is not importable), so a bad flag stops vs-controller at start, not
// every runtime's apply.
func validPeer(p networkingv1.NetworkPolicyPeer) error {
	if p.IPBlock != nil {
		if p.PodSelector != nil || p.NamespaceSelector != nil {
			return errors.New("ipBlock cannot be combined with a selector")
		}
		_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
		if err != nil {
			return fmt.Errorf("ipBlock.cidr: %w", err)
		}
		for _, e := range p.IPBlock.Except {
			ip, except, err := net.ParseCIDR(e)
			if err != nil {
				return fmt.Errorf("ipBlock.except: %w", err)
			}
			ones, _ := except.Mask.Size()
			cOnes, _ := cidr.Mask.Size()
			if !cidr.Contains(ip) || ones <= cOnes {
				return fmt.Errorf("ipBlock.except %s is not strictly inside %s", e, p.IPBlock.CIDR)
			}
		}
		return nil
	}
	if p.PodSelector == nil && p.NamespaceSelector == nil {
		return errors.New("set podSelector, namespaceSelector or ipBlock")
	}
	for name, sel := range map[string]*metav1.LabelSelector{"podSelector": p.PodSelector, "namespaceSelector": p.NamespaceSelector} {
		if sel == nil {
			continue
		}
		if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return nil
}

// KCPPort is the port of a --kcp-gateway-host value (host or host:port);
// DefaultKCPPort without one.
func KCPPort(kcpAddr string) (int32, error) {
	if kcpAddr == "" {
		return DefaultKCPPort, nil
	}
	_, port, err := net.SplitHostPort(kcpAddr)
	if err != nil {
		var addrErr *net.AddrError
		if errors.As(err, &addrErr) && addrErr.Err == "missing port in address" {
			return DefaultKCPPort, nil
		}
		return 0, err
	}
	n, err := strconv.ParseUint(port, 10, 16)
	if err != nil || n == 0 {
		return 0, fmt.Errorf("port %q: want 1..65535", port)
	}
	return int32(n), nil
}

// NetworkPolicy is manifests/skr/networkpolicy.yaml in the bundle's
// namespace: the webhook's admission port reachable from
// o.WebhookIngressFrom (any source when empty), egress to the KCP gateway's
// port (of o.KCPAddr) and DNS only.
func NetworkPolicy(o Options) (*networkingv1.NetworkPolicy, error) {
	np := &networkingv1.NetworkPolicy{}
	if err := decode(skr.NetworkPolicy, np); err != nil {
		return nil, err
	}
	np.Namespace = o.namespace()
	if len(np.Spec.Ingress) == 0 || len(np.Spec.Egress) == 0 || len(np.Spec.Egress[0].Ports) != 1 {
		return nil, errors.New("manifests/skr/networkpolicy.yaml: want the webhook's ingress rule and the KCP egress rule (one port) first")
	}
	if len(o.WebhookIngressFrom) > 0 {
		np.Spec.Ingress[0].From = make([]networkingv1.NetworkPolicyPeer, len(o.WebhookIngressFrom))
		for i := range o.WebhookIngressFrom {
			o.WebhookIngressFrom[i].DeepCopyInto(&np.Spec.Ingress[0].From[i])
		}
	}
	port, err := KCPPort(o.KCPAddr)
	if err != nil {
		return nil, fmt.Errorf("KCP gateway address %q: %w", o.KCPAddr, err)
	}
	np.Spec.Egress[0].Ports[0].Port = ptr.To(intstr.FromInt32(port))
	return np, nil
}

// FormatIngressFrom is the flag value of peers (for logs).
func FormatIngressFrom(peers []networkingv1.NetworkPolicyPeer) string {
	if len(peers) == 0 {
		return "any source"
	}
	b, _ := json.Marshal(peers)
	return string(b)
}
