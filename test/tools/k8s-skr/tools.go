//go:build tools

// Package k8sskr pins the Kubernetes source that `make envtest-assets`
// compiles into bin/k8s/<SKR version>/kube-apiserver: the SKR's API server,
// at the oldest Kubernetes minor an SKR may run (docs/deploying.md). The
// KCP's API server, kube-controller-manager, etcd and kubectl come from
// test/tools/k8s, at the newest. A module of its own: one module can pin
// only one k8s.io/kubernetes.
package k8sskr

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
)
