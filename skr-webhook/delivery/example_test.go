package delivery_test

import (
	"context"
	"encoding/json"
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
	body, _ := json.Marshal(ev)
	p <- fmt.Sprintf("POST %s %s", contract.EventPath(manager), body)
	return delivery.Result{Outcome: delivery.Delivered, Status: 200}
}

func ExampleNew() {
	sent := make(printer, 10)
	d := delivery.New(delivery.Config{QueueSize: 100, Workers: 1}, sent, logr.Discard())
	ev := contract.WatchEvent{
		Watched:    contract.ObjectKey{Namespace: "kcp-system", Name: "kyma-sample"},
		WatchedGvk: contract.GroupVersionKind{Group: "operator.kyma-project.io", Version: "v1beta2", Kind: "Kyma"},
	}
	// The manager is new: it gets a startup resync first (handed out before
	// any change). Three changes before the workers run collapse into one
	// delivery.
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
	// POST /v2/lifecycle-manager/event {"watched":{},"watchedGvk":{},"resync":"startup"}
	// POST /v2/lifecycle-manager/event {"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}
}
