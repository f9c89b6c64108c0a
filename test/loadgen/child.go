package loadgen

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/seed-c8be168e/runtime-watcher/listener"
)

// Server kinds every benchmark binary can be re-executed as (StartChild),
// and the servers command (test/loadgen/servers) serves (StartServer).
const (
	KindAlwaysAllow = "always-allow"  // AlwaysAllow over gRPC
	KindBareHTTP    = "bare-net-http" // BareHTTP
	// KindListener is the listener as an operator runs it: identity from
	// ext-authz's header, its metrics registered, one goroutine draining
	// Events() (an operator's source.Channel costs more). The arg is the
	// manager name of its path.
	KindListener = "listener"
)

const (
	serveEnv   = "LOADGEN_SERVE"
	argEnv     = "LOADGEN_SERVE_ARG"
	addrPrefix = "LOADGEN_ADDR="
)

// ServeFunc serves on ln until ctx ends; arg is StartChild's.
type ServeFunc func(ctx context.Context, ln net.Listener, arg string) error

// ServeIfChild makes this process a server when StartChild started it:
// it serves the kind asked (KindAlwaysAllow, KindBareHTTP or one of extra)
// on a loopback port until SIGTERM and exits. Otherwise it returns at once.
// Call it first in main or TestMain.
func ServeIfChild(extra map[string]ServeFunc) {
	kind := os.Getenv(serveEnv)
	if kind == "" {
		return
	}
	if err := serveChild(kind, os.Getenv(argEnv), extra); err != nil {
		fmt.Fprintf(os.Stderr, "loadgen %s server: %v\n", kind, err)
		os.Exit(1)
	}
	os.Exit(0)
}

func serveChild(kind, arg string, extra map[string]ServeFunc) error {
	serve, ok := extra[kind]
	switch {
	case ok:
	case kind == KindAlwaysAllow:
		serve = func(ctx context.Context, ln net.Listener, _ string) error {
			gs := NewGRPCServer(AlwaysAllow{})
			go func() { <-ctx.Done(); gs.Stop() }()
			return gs.Serve(ln)
		}
	case kind == KindBareHTTP:
		serve = func(ctx context.Context, ln net.Listener, _ string) error {
			srv := BareHTTP()
			go func() { <-ctx.Done(); _ = srv.Close() }()
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		}
	case kind == KindListener:
		serve = serveListener
	default:
		return fmt.Errorf("unknown server kind %q", kind)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	fmt.Printf("%s%s\n", addrPrefix, ln.Addr())
	return serve(ctx, ln, arg)
}

func serveListener(ctx context.Context, ln net.Listener, manager string) error {
	l, err := listener.New("", manager, listener.WithNetListener(ln),
		listener.WithRegisterer(prometheus.NewRegistry()), listener.WithLogger(logr.Discard()))
	if err != nil {
		return err
	}
	go DrainEvents(ctx, l)
	return l.Start(ctx)
}

// DrainEvents receives l's events until ctx ends, as the cheapest consumer.
func DrainEvents(ctx context.Context, l *listener.Listener) {
	for {
		select {
		case <-l.Events():
		case <-ctx.Done():
			return
		}
	}
}

// Child is a server in a process of its own.
type Child struct {
	Kind, Addr string
	cmd        *exec.Cmd
}

// StartChild re-executes this binary (whose main or TestMain calls
// ServeIfChild) as a server of kind, with arg, and returns once it listens.
func StartChild(kind, arg string) (*Child, error) { return StartServer(os.Args[0], kind, arg) }

// StartServer runs binary, whose main calls ServeIfChild (e.g. the servers
// command), as a server of kind, with arg, and returns once it listens.
func StartServer(binary, kind, arg string) (*Child, error) {
	cmd := exec.Command(binary)
	cmd.Env = append(os.Environ(), serveEnv+"="+kind, argEnv+"="+arg)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	c := &Child{Kind: kind, cmd: cmd}
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if addr, ok := strings.CutPrefix(sc.Text(), addrPrefix); ok {
			c.Addr = addr
			go func() { _, _ = io.Copy(io.Discard, out) }()
			return c, nil
		}
	}
	_ = c.Stop()
	return nil, fmt.Errorf("%s server did not start", kind)
}

// Pid is the server's process ID.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// CPU reads the server process's CPU clock.
func (c *Child) CPU() (time.Duration, error) { return ProcessCPU(c.Pid()) }

// Stop ends the server (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (c *Child) Stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- c.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		return fmt.Errorf("%s server did not stop on SIGTERM: %v", c.Kind, <-done)
	}
}
