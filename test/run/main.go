// Command run is what `make run` starts: the local Runtime Watcher
// environment (ARCHITECTURE.md §4). It starts a KCP and an SKR API server
// (real kube-apiserver and etcd built from source) with every CRD installed,
// prints how to reach each with kubectl, and stops everything on Ctrl-C,
// removing its temporary files.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "make run:", err)
		os.Exit(1)
	}
}

func run() error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	dir, err := os.MkdirTemp("", "runtime-watcher-run-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Println("Starting the KCP and SKR API servers (real kube-apiserver + etcd)...")
	env, err := testenv.StartInDir(dir, "kcp", "skr")
	if err != nil {
		return err
	}
	defer func() {
		fmt.Println("Stopping the API servers and removing", dir)
		if err := env.Stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop:", err)
		}
	}()

	assets, _ := testenv.AssetsDir()
	kubectl := filepath.Join(assets, "kubectl")
	fmt.Println()
	for _, name := range []string{"kcp", "skr"} {
		c := env.Cluster(name)
		fmt.Printf("%s cluster: %s\n  kubeconfig: %s\n  try:        %s --kubeconfig %s get crds\n\n",
			name, c.Config.Host, c.KubeconfigPath, kubectl, c.KubeconfigPath)
	}
	fmt.Println("Both clusters have the Watcher, Kyma (stand-in), Istio and cert-manager CRDs installed.")
	fmt.Println("Press Ctrl-C to stop.")
	<-ctx.Done()
	return nil
}
