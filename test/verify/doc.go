// Package verify holds no code, only the test that `make verify` catches
// stale generated files: in a clone of the repository it makes a CRD or the
// vs-controller RBAC stale and expects the Makefile's check to fail with the
// diff of that file.
package verify
