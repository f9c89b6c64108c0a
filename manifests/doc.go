// Package manifests holds no code: it is where the tests of the deployment
// manifests live (manifests_test.go and its siblings). They build every
// kustomization under manifests/ in process, have a real API server with all
// CRDs installed accept every object (server-side dry-run, strict field
// validation, Pod Security warnings treated as errors), check least-privilege
// RBAC with SubjectAccessReviews, and keep the manifests, the Istio mesh
// config, the kind e2e files, the Dockerfile and the binaries' flags in step
// with each other and with the wire contract (api/contract).
package manifests
