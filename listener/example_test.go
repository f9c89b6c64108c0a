package listener_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
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
