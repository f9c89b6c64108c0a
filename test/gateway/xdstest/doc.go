// Package xdstest serves tests the configuration istiod generates for the
// kcp-gateway Gateway, its watcher route and the CUSTOM ext-authz
// AuthorizationPolicy (manifests/kcp/base/gateway.yaml): a static
// state-of-the-world ADS server (Server) holding an Istio-shaped listener,
// route, clusters and endpoints (Edge) and the Secrets its SDS names refer
// to (Secrets). The gateway stand-in (test/gateway) connects to it as it
// does to istiod.
package xdstest
