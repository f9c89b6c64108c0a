// Command kymalistener is an operator built on Kyma's own listener,
// github.com/kyma-project/runtime-watcher/listener v1.4.3 (the one
// Lifecycle Manager runs), unchanged: it serves POST /v2/<manager>/event
// with event.SKREventListener and takes every event from its channel as an
// operator's source.Channel would.
//
// The e2e suite (spec label kyma-listener, test/localenv's KymaOperator)
// runs it behind our edge and reads what it received: with --print, one
// JSON line per event on stdout (Line), the content of the unstructured
// object exactly as Kyma's listener built it, each value with its Go type.
// make bench-compare runs it without --print as Kyma's listener's row
// beside ours and bare net/http.
//
// It lives in its own module (test/tools/kymalistener) so that Kyma's
// listener and the Kubernetes libraries it needs stay out of the product's
// go.mod.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/kyma-project/runtime-watcher/listener/pkg/metrics"
	"github.com/kyma-project/runtime-watcher/listener/pkg/v2/event"
	"github.com/prometheus/client_golang/prometheus"
)

// Line is one event as the operator received it on Kyma's channel.
type Line struct {
	// Time is when the channel delivered it.
	Time time.Time `json:"time"`
	// Content is the unstructured object's content, by key.
	Content map[string]Value `json:"content"`
}

// Value is one content value: its Go type (e.g. "types.NamespacedName")
// and the value as encoding/json writes it.
type Value struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

func main() {
	listen := flag.String("listen-addr", ":8082", "address of Kyma's listener (host:port; it binds it itself)")
	manager := flag.String("manager", "kyma-listener", "the component name: Kyma's listener serves POST /v2/<manager>/event")
	health := flag.String("health-addr", "", "if set, serve GET /readyz here: 200 once Kyma's listener accepts connections")
	print := flag.Bool("print", false, "print one JSON line (Line) per event on stdout")
	verbose := flag.Bool("log", false, "log as Kyma's listener does (its logr logger) to stderr; off: its own default, a discarding logger")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	out := io.Discard
	if *print {
		out = os.Stdout
	}
	if err := run(ctx, *listen, *manager, *health, out, *verbose); err != nil {
		fmt.Fprintln(os.Stderr, "kymalistener:", err)
		os.Exit(1)
	}
}

// run serves until ctx ends, writing a Line per event to out.
func run(ctx context.Context, listen, manager, health string, out io.Writer, verbose bool) error {
	// As an operator does: Kyma's metrics in its registry (they are
	// updated on every request whether registered or not).
	metrics.Init(prometheus.NewRegistry())
	l := event.NewSKREventListener(listen, manager)
	if verbose {
		l.Logger = funcr.New(func(prefix, args string) { fmt.Fprintln(os.Stderr, prefix, args) }, funcr.Options{})
	} else {
		l.Logger = logr.Discard()
	}
	errs := make(chan error, 2)
	go func() { errs <- l.Start(ctx) }()
	if health != "" {
		srv := &http.Server{Addr: health, ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			c, err := net.DialTimeout("tcp", listen, time.Second)
			if err != nil {
				http.Error(w, err.Error(), http.StatusServiceUnavailable)
				return
			}
			_ = c.Close()
		})}
		go func() {
			if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
				errs <- err
			}
		}()
		go func() { <-ctx.Done(); _ = srv.Close() }()
	}
	enc := json.NewEncoder(out)
	for {
		select {
		case err := <-errs:
			return err
		case <-ctx.Done():
			return nil
		case ev := <-l.ReceivedEvents():
			if out == io.Discard {
				continue
			}
			line, err := lineOf(time.Now(), ev.Object.UnstructuredContent())
			if err != nil {
				return err
			}
			if err := enc.Encode(line); err != nil {
				return err
			}
		}
	}
}

// lineOf records content as it is: every key, each value's Go type.
func lineOf(t time.Time, content map[string]any) (Line, error) {
	l := Line{Time: t, Content: make(map[string]Value, len(content))}
	for k, v := range content {
		raw, err := json.Marshal(v)
		if err != nil {
			return Line{}, fmt.Errorf("content %q: %w", k, err)
		}
		l.Content[k] = Value{Type: fmt.Sprintf("%T", v), Value: raw}
	}
	return l, nil
}
