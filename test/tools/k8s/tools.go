//go:build tools

// Package k8s pins the Kubernetes and etcd sources that `make envtest-assets`
// compiles into bin/k8s/<version>/ (kube-apiserver, kube-controller-manager,
// etcd, kubectl), and the kind node image adds kubelet, kubeadm,
// kube-scheduler and kube-proxy (test/kind/node-image.sh). It is a separate module so that k8s.io/kubernetes never
// enters the project's own dependency graph.
package k8s

import (
	_ "go.etcd.io/etcd/server/v3"
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubeadm"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
