// Command servers runs one of loadgen's servers (the always-allow ext_authz
// ceiling, bare net/http, the listener) when loadgen.StartServer starts it.
// It is built from the product's module, so the servers link the same
// grpc-go, golang.org/x/net and Prometheus client as ext-authz and the
// listener, also for make bench-compare, whose own module (with OPA)
// resolves newer versions.
package main

import (
	"fmt"
	"os"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
)

func main() {
	loadgen.ServeIfChild(nil)
	fmt.Fprintln(os.Stderr, "servers: run by loadgen.StartServer (LOADGEN_SERVE names the server)")
	os.Exit(2)
}
