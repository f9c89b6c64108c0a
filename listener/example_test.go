package listener_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/identity"
	"github.com/seed-c8be168e/runtime-watcher/listener"
)

// ExampleNew starts a listener for the manager "lifecycle-manager", posts
// an event as the gateway forwards it after ext-authz allowed it, and reads
// it from the channel a controller would watch.
func ExampleNew() {
	// An operator passes an address such as ":8082"; the example binds a free
	// loopback port first so it knows where to post.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	l, err := listener.New("", "lifecycle-manager",
		listener.WithNetListener(ln), listener.WithRegisterer(prometheus.NewRegistry()))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan error)
	go func() { stopped <- l.Start(ctx) }() // a manager does this after mgr.Add(l)

	req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String()+l.Path(), strings.NewReader(
		`{"watched":{"namespace":"kcp-system","name":"kyma-sample"},"watchedGvk":{"group":"operator.kyma-project.io","version":"v1beta2","kind":"Kyma"}}`))
	req.Header.Set(contract.HeaderRuntimeID, "runtime-a") // set by ext-authz
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		panic(err)
	}
	resp.Body.Close()
	fmt.Println(resp.Status)

	ev, _ := listener.EventFrom((<-l.Events()).Object)
	fmt.Println(ev.RuntimeID, ev.Watched, ev.WatchedGVK.Kind)

	cancel()
	fmt.Println(<-stopped)
	// Output:
	// 200 OK
	// runtime-a kcp-system/kyma-sample Kyma
	// <nil>
}

// Example_manager wires the listener into an operator's manager: the
// listener serves on every replica (SetupWithManager), its channel is the
// source of a controller that reconciles the Kyma of each event's runtime,
// found by its runtime-id label or name (identity.NewKymaLookup).
func Example_manager() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	l, err := listener.New(":8082", "lifecycle-manager")
	if err != nil {
		panic(err)
	}
	if err := l.SetupWithManager(mgr); err != nil {
		panic(err)
	}
	if err := identity.IndexRuntimeID(context.Background(), mgr.GetFieldIndexer()); err != nil {
		panic(err)
	}
	err = ctrl.NewControllerManagedBy(mgr).Named("skr-events").
		WatchesRawSource(source.Channel(l.Events(), listener.EnqueueKyma(mgr.GetCache(), "kcp-system"))).
		Complete(kymaReconciler{})
	if err != nil {
		panic(err)
	}
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

// Example_sanPinning verifies the client certificate in process, for a
// gateway that forwards XFCC (SANITIZE_SET) without ext-authz. The Kyma CRs
// come from the manager's cache.
func Example_sanPinning() {
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{})
	if err != nil {
		panic(err)
	}
	if err := identity.IndexRuntimeID(context.Background(), mgr.GetFieldIndexer()); err != nil {
		panic(err)
	}
	verifier := &identity.Verifier{Lookup: identity.NewKymaLookup(mgr.GetCache(), "kcp-system")}
	l, err := listener.New(":8082", "lifecycle-manager", listener.WithSANPinning(verifier))
	if err != nil {
		panic(err)
	}
	_ = mgr.Add(l)
	_ = mgr.Start(ctrl.SetupSignalHandler())
}

type kymaReconciler struct{ client.Client }

func (kymaReconciler) Reconcile(context.Context, ctrl.Request) (ctrl.Result, error) {
	return ctrl.Result{}, nil
}
