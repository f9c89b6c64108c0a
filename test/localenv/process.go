package localenv

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
)

// process is one of the project's binaries running as a real process, its
// stderr in <dir>/logs/<name>.log.
type process struct {
	name string
	cmd  *exec.Cmd
	done chan struct{} // closed when it exited
	err  error         // how it exited, once done is closed
	log  string
}

func startProcess(dir, name, binary string, stdout io.Writer, env []string, args ...string) (*process, error) {
	return startProcessIn(dir, "", name, binary, stdout, env, args...)
}

// startProcessIn is startProcess with the working directory workdir ("":
// this process's).
func startProcessIn(dir, workdir, name, binary string, stdout io.Writer, env []string, args ...string) (*process, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return nil, err
	}
	logPath := filepath.Join(dir, "logs", name+".log")
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Dir = workdir
	cmd.Stderr = logFile
	cmd.Stdout = logFile
	if stdout != nil {
		cmd.Stdout = stdout
	}
	// Not in the terminal's process group: Ctrl-C reaches `make run`, which
	// then stops the processes in order; and gone with the runner.
	cmd.SysProcAttr = childAttr()
	if err := cmd.Start(); err != nil {
		_ = logFile.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, done: make(chan struct{}), log: logPath}
	go func() {
		err := cmd.Wait()
		_ = logFile.Close()
		if c, ok := stdout.(io.Closer); ok {
			_ = c.Close() // the reader of a pipe sees EOF
		}
		p.err = err
		close(p.done)
	}()
	return p, nil
}

// fileLogger is a logger writing to <dir>/logs/<name>.log, for a part of
// the environment that runs in this process.
func fileLogger(dir, name string) (logr.Logger, io.Closer, error) {
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		return logr.Logger{}, nil, err
	}
	f, err := os.Create(filepath.Join(dir, "logs", name+".log"))
	if err != nil {
		return logr.Logger{}, nil, err
	}
	var mu sync.Mutex
	return funcr.New(func(prefix, args string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(f, time.Now().UTC().Format(time.RFC3339Nano), prefix, args)
	}, funcr.Options{Verbosity: 1}), f, nil
}

// pid is the process's id (and that of its process group).
func (p *process) pid() int { return p.cmd.Process.Pid }

// stop sends SIGTERM to the process's group and waits up to 10 s, then
// kills the group.
func (p *process) stop() error {
	if p == nil {
		return nil
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
		return fmt.Errorf("%s did not stop within 10s after SIGTERM; killed", p.name)
	}
}

// waitReady polls url until it answers 200, the process exits, or timeout.
func (p *process) waitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%s exited before it was ready (%v); its log ends:\n%s", p.name, p.err, p.logTail())
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s within %s; its log ends:\n%s", p.name, url, timeout, p.logTail())
		case <-tick.C:
		}
	}
}

// logTail is the end of the process's log, for error messages (the log
// folder may be gone by the time someone reads them).
func (p *process) logTail() string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
