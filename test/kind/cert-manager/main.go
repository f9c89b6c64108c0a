// Command cert-manager is the cert-manager of the kind e2e: cert-manager's own
// controllers, as test/cmcontrollers runs them for `make run` and the test
// suites (the controllers of cert-manager's `controller` binary that issue
// and renew Certificates with CA and SelfSigned issuers, from the
// cert-manager module go.mod requires, with its defaults and no webhook), in
// a pod against the API server of its service account. The module proxy
// refuses cert-manager's cmd/* modules, not its main module: this is the
// nearest build of its controller binary (docs/deploying.md, "Installing on
// kind"). Built into an image by test/kind/e2e.sh; deployed by
// test/kind/cert-manager.yaml.
package main

import (
	"context"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/go-logr/logr"
	"k8s.io/klog/v2"
	"k8s.io/klog/v2/textlogger"

	"github.com/seed-c8be168e/runtime-watcher/test/cmcontrollers"
)

func main() {
	ns := flag.String("cluster-resource-namespace", cmcontrollers.DefaultClusterResourceNamespace, "the namespace of ClusterIssuers' Secrets")
	flag.Parse()
	log := textlogger.NewLogger(textlogger.NewConfig())
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err := cmcontrollers.Run(ctx, cmcontrollers.Options{InCluster: true, ClusterResourceNamespace: *ns, Log: log})
	if err != nil && ctx.Err() == nil {
		fail(log, err)
	}
}

func fail(log logr.Logger, err error) {
	log.Error(err, "cert-manager's controllers stopped")
	klog.Flush()
	os.Exit(1)
}
