// Package bench holds ext-authz's benchmark (bench_test.go): Check over real
// gRPC on loopback against the real ext-authz binary with 10,000 Kyma CRs
// (-authzbench.runtimes=N for another fleet size, e.g. 100000)
// cached from a real API server, side by side with an always-allow Check
// server in its own process (the physical limit of gRPC on the machine), at
// concurrency 16 and 64. It reports RPS, p50 and p99 of both and the
// binary's resident memory.
package bench
