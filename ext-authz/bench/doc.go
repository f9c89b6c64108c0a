// Package bench holds ext-authz's benchmark (bench_test.go): Check over real
// gRPC on loopback against the real ext-authz binary with 10,000 Kyma CRs
// (-authzbench.runtimes=N for another fleet size, e.g. 100000)
// cached from a real API server, side by side with the always-allow
// ceiling in a process of its own (test/loadgen), at concurrency 16 and 64.
// It reports each server's CPU per Check, RPS, p50 and p99, and the
// binary's resident memory, with the goals of test/loadgen.
package bench
