package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/seed-c8be168e/runtime-watcher/test/loadgen"
	"github.com/seed-c8be168e/runtime-watcher/test/testenv"
)

// Kyma's listener (docs/architecture.md §3.14: the peer a user would pick
// instead of ours) runs as test/tools/kymalistener: an operator on
// github.com/kyma-project/runtime-watcher/listener, unchanged, whose
// goroutine takes every event from its channel. That module, not this one,
// requires Kyma's listener (and the Kubernetes libraries it needs); it is
// built with testenv.BuildBinary like the e2e suite builds it.
const (
	kindKymaListener = "kyma-listener"
	kymaListenerDir  = "test/tools/kymalistener"
	kymaListenerMod  = "github.com/kyma-project/runtime-watcher/listener"
)

type kymaListenerProcess struct {
	addr string
	cmd  *exec.Cmd
	done chan error
}

// startKymaListener starts it for manager on a free loopback port and
// returns once it accepts connections (Kyma's listener binds the address
// itself, so the port is chosen here).
func startKymaListener(manager string) (*kymaListenerProcess, error) {
	binary, err := testenv.BuildBinary(kymaListenerDir)
	if err != nil {
		return nil, err
	}
	addr := testenv.FreeAddr()
	cmd := exec.Command(binary, "--listen-addr", addr, "--manager", manager)
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	k := &kymaListenerProcess{addr: addr, cmd: cmd, done: make(chan error, 1)}
	go func() { k.done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			_ = c.Close()
			return k, nil
		}
		select {
		case err := <-k.done:
			return nil, fmt.Errorf("exited before it listened on %s: %v", addr, err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = k.stop()
			return nil, fmt.Errorf("not listening on %s within 30s: %w", addr, err)
		}
	}
}

func (k *kymaListenerProcess) cpu() (time.Duration, error) {
	return loadgen.ProcessCPU(k.cmd.Process.Pid)
}

func (k *kymaListenerProcess) stop() error {
	_ = k.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-k.done:
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return err
		}
		return nil
	case <-time.After(10 * time.Second):
		_ = k.cmd.Process.Kill()
		return fmt.Errorf("the Kyma listener did not stop on SIGTERM: %v", <-k.done)
	}
}

// kymaListenerVersion is the version of Kyma's listener that
// test/tools/kymalistener/go.mod requires.
func kymaListenerVersion() string {
	f, err := os.Open(filepath.Join(testenv.RepoRoot(), kymaListenerDir, "go.mod"))
	if err != nil {
		return "(unknown version)"
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && fields[0] == kymaListenerMod {
			return fields[1]
		}
	}
	return "(unknown version)"
}
