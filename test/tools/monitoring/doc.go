// Package monitoring validates manifests/monitoring (docs/architecture.md §4.8):
// the PrometheusRule's groups load with Prometheus' own rule loader
// (model/rulefmt: expressions parse, templates compile), every dashboard
// query parses with its PromQL parser, and every metric the rules and the
// dashboard name is one this repository's code defines.
//
// It is a module of its own so the main module does not depend on
// github.com/prometheus/prometheus; `make test` runs it.
package monitoring
