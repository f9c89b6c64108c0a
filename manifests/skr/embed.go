// Package skr embeds the SKR kustomize base (the skr-webhook Deployment,
// PodDisruptionBudget, NetworkPolicy, Service and Namespace) so that vs-controller renders the bundle it applies
// into every runtime from the very files this folder ships: one source of
// truth, no YAML copies in Go strings.
package skr

import _ "embed"

// Namespace is namespace.yaml.
//
//go:embed namespace.yaml
var Namespace []byte

// Service is service.yaml.
//
//go:embed service.yaml
var Service []byte

// Deployment is deployment.yaml.
//
//go:embed deployment.yaml
var Deployment []byte

// PodDisruptionBudget is pdb.yaml.
//
//go:embed pdb.yaml
var PodDisruptionBudget []byte

// NetworkPolicy is networkpolicy.yaml.
//
//go:embed networkpolicy.yaml
var NetworkPolicy []byte
