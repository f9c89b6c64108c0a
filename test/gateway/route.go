package gateway

import (
	istioapinetworking "istio.io/api/networking/v1"
	istionetworkingv1 "istio.io/client-go/pkg/apis/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// EventRoute is a VirtualService kcp-system/watcher bound to gateway
// ("<namespace>/<name>") that routes host's event path of manager
// (contract.EventPath) to destination:port, as vs-controller writes one
// per Watcher (for tests that need one route through the stand-in).
func EventRoute(gateway, host, manager, destination string, port uint32) *istionetworkingv1.VirtualService {
	vs := &istionetworkingv1.VirtualService{ObjectMeta: metav1.ObjectMeta{Name: "watcher", Namespace: "kcp-system"}}
	vs.Spec.Gateways = []string{gateway}
	vs.Spec.Hosts = []string{host}
	vs.Spec.Http = []*istioapinetworking.HTTPRoute{{
		Match: []*istioapinetworking.HTTPMatchRequest{{Uri: &istioapinetworking.StringMatch{
			MatchType: &istioapinetworking.StringMatch_Prefix{Prefix: contract.EventPath(manager)}}}},
		Route: []*istioapinetworking.HTTPRouteDestination{{Destination: &istioapinetworking.Destination{
			Host: destination, Port: &istioapinetworking.PortSelector{Number: port}}}},
	}}
	return vs
}
