// Package envoy runs and reads upstream Envoy, the ingress gateway's data
// plane, in tests and in the local environment (docs/architecture.md §1,
// "Local"): the binary `make envoy-assets` installs (testenv.EnvoyBinary),
// read through its admin API on loopback (Admin: statistics, config_dump,
// server_info), its bootstraps checked with `envoy --mode validate`
// (Validate), and the extensions a configuration names checked against the
// ones the binary has (UnknownExtensions).
//
// The local environment's gateway is Envoy started by Istio's pilot-agent
// and configured by istiod (test/localenv). Tests that need only the edge
// without the control planes (test/fips, test/traceflow) run Envoy on a
// static bootstrap with the same listener, route and cluster istiod
// generates for manifests/kcp/base/gateway.yaml (StaticEdge), the
// certificates as static SDS secrets of the names istiod gives them.
package envoy
