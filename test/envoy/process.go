package envoy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Process is an Envoy started on a static bootstrap.
type Process struct {
	Admin Admin
	cmd   *exec.Cmd
	done  chan struct{}
	err   error
}

// Options of Start.
type Options struct {
	// Dir holds the bootstrap and the admin address file.
	Dir string
	// Bootstrap is the bootstrap, as JSON (or YAML).
	Bootstrap []byte
	// Output takes Envoy's log (nil: discarded).
	Output io.Writer
	// Concurrency is Envoy's worker threads (0: 1).
	Concurrency int
	// LogLevel is Envoy's log level ("": warning).
	LogLevel string
}

// Validate runs `envoy --mode validate` on the bootstrap at path: the
// binary parses it, instantiates every static resource and its extensions,
// and exits without serving. The error carries Envoy's output.
func Validate(ctx context.Context, binary, path string) error {
	out, err := exec.CommandContext(ctx, binary, "--mode", "validate", "-c", path, "--log-level", "warning").CombinedOutput() //nolint:gosec // the test's own binary and file
	if err != nil {
		return fmt.Errorf("envoy --mode validate -c %s: %w\n%s", path, err, out)
	}
	if !strings.Contains(string(out), "OK") {
		return fmt.Errorf("envoy --mode validate -c %s did not say OK:\n%s", path, out)
	}
	return nil
}

// Start runs the Envoy of testenv.EnvoyBinary on o.Bootstrap (its admin
// address is the one Envoy bound: give 127.0.0.1 port 0) and returns once
// its admin API answers and it is initialised (/ready: LIVE).
func Start(ctx context.Context, o Options) (*Process, error) {
	binary, err := testenv.EnvoyBinary()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(o.Dir, "envoy-bootstrap.json")
	if err := os.WriteFile(cfg, o.Bootstrap, 0o600); err != nil {
		return nil, err
	}
	addrFile := filepath.Join(o.Dir, "envoy-admin-address")
	_ = os.Remove(addrFile)
	concurrency := max(o.Concurrency, 1)
	level := o.LogLevel
	if level == "" {
		level = "warning"
	}
	cmd := exec.Command(binary, "-c", cfg, "--disable-hot-restart", "--concurrency", fmt.Sprint(concurrency), //nolint:gosec // the test's own binary
		"--admin-address-path", addrFile, "--log-level", level, "--drain-time-s", "1")
	cmd.Stdout, cmd.Stderr = o.Output, o.Output
	cmd.SysProcAttr = procAttr()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &Process{cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if p.Admin.URL == "" {
			if b, err := os.ReadFile(addrFile); err == nil && len(strings.TrimSpace(string(b))) > 0 {
				p.Admin.URL = "http://" + strings.TrimSpace(string(b))
			}
		}
		if p.Admin.URL != "" && p.Admin.Ready(ctx) {
			return p, nil
		}
		select {
		case <-p.done:
			return nil, fmt.Errorf("envoy exited before it was ready: %w", p.err)
		case <-ctx.Done():
			_ = p.Stop()
			return nil, fmt.Errorf("envoy not ready (admin %q): %w", p.Admin.URL, ctx.Err())
		case <-tick.C:
		}
	}
}

// Stop ends Envoy (SIGTERM, then SIGKILL after 10 s) and waits for it.
func (p *Process) Stop() error {
	if p == nil {
		return nil
	}
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
		return errors.New("envoy did not stop within 10s after SIGTERM; killed")
	}
}

// Pid is Envoy's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }
