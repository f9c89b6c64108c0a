// Package integration holds ext-authz's integration suite (Ginkgo): the real
// ext-authz binary against a real kube-apiserver and etcd from test/testenv,
// driven over real gRPC with CheckRequests shaped like Envoy's.
package integration
