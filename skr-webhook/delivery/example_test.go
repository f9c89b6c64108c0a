package delivery_test

import (
	"context"
	"fmt"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/skr-webhook/delivery"
)

// printer is a Sender that prints instead of posting to the KCP; in the
// binary it is a delivery.HTTPSender over a delivery.Client.
type printer chan string

func (p printer) Send(_ context.Context, manager string, ev contract.WatchEvent) delivery.Result {
	p <- fmt.Sprintf("POST %s %s/%s", contract.EventPath(manager), ev.Watched.Namespace, ev.Watched.Name)
	return delivery.Result{Outcome: delivery.Delivered, Status: 200}
}

func ExampleNew() {
	sent := make(printer, 10)
	d := delivery.New(delivery.Config{QueueSize: 100, Workers: 1}, sent, logr.Discard())
	ev := contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
		WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
	}
	// Three changes before the workers run collapse into one delivery.
	d.Enqueue("lifecycle-manager", ev)
	d.Enqueue("lifecycle-manager", ev)
	d.Enqueue("lifecycle-manager", ev)
	d.Start()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = d.Shutdown(ctx) // delivers what is pending, then stops
	close(sent)
	for s := range sent {
		fmt.Println(s)
	}
	// Output:
	// POST /v2/lifecycle-manager/event kcp-system/kyma-sample
}
