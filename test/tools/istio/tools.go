//go:build tools

// Package istio pins the Istio source that `make istio-assets` compiles into
// bin/istio/<version>/: pilot-discovery (istiod) and pilot-agent (the
// ingress gateway's agent, which starts Envoy). It is a separate module so
// that istio.io/istio, and the newer k8s.io it needs, never enter the
// project's own dependency graph.
package istio

import (
	_ "istio.io/istio/pilot/cmd/pilot-agent"
	_ "istio.io/istio/pilot/cmd/pilot-discovery"
)
