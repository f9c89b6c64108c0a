package localenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// NotifyStop is the runner's signal handling: the context ends on SIGINT
// (Ctrl-C, which a terminal sends to the whole foreground process group:
// `make`, the runner and a `tee` behind it), SIGTERM and SIGHUP (the
// terminal closed). SIGPIPE is ignored: when the reader of stdout is gone
// (`make run | tee log`, with tee stopped by the same Ctrl-C), writes fail
// with EPIPE instead of killing the runner before it cleaned up.
func NotifyStop(parent context.Context) (context.Context, context.CancelFunc) {
	signal.Ignore(syscall.SIGPIPE)
	return signal.NotifyContext(parent, os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
}

// DefaultRunStateDir is where `make run` records what it started:
// $TMPDIR/runtime-watcher-run.
func DefaultRunStateDir() string { return filepath.Join(os.TempDir(), "runtime-watcher-run") }

// RunRecord is the record of one run (`make run`) in a fixed place: the
// runner's pid, its temporary folder and the processes it started. A run
// that is killed before it can clean up (SIGKILL, OOM) leaves the record,
// and the next run's ClaimRun kills what is left and removes the folder.
// Each process is recorded with its start time, so a pid that the system
// has since given to another process is never touched.
type RunRecord struct {
	path string
	mu   sync.Mutex
	rec  runRecord
}

type runRecord struct {
	Runner   procID   `json:"runner"`
	Dir      string   `json:"dir"`
	Children []procID `json:"children"`
}

type procID struct {
	PID   int    `json:"pid"`
	Start uint64 `json:"start"` // clock ticks after boot, /proc/<pid>/stat field 22
}

const runRecordFile = "run.json"

// ClaimRun cleans up after the previous run recorded in stateDir, if it was
// killed: its recorded processes that still run are killed (with their
// process groups) and its folder is removed; what was cleaned is returned,
// for the user. It fails when the previous runner is still alive. Then it
// records this process as the runner, with dir as its folder.
func ClaimRun(stateDir, dir string) (*RunRecord, []string, error) {
	if err := os.MkdirAll(stateDir, 0o700); err != nil {
		return nil, nil, err
	}
	path := filepath.Join(stateDir, runRecordFile)
	var cleaned []string
	if b, err := os.ReadFile(path); err == nil {
		var old runRecord
		if err := json.Unmarshal(b, &old); err != nil {
			cleaned = append(cleaned, fmt.Sprintf("unreadable record %s (%v)", path, err))
		} else {
			if old.Runner.PID != os.Getpid() && old.Runner.alive() {
				return nil, nil, fmt.Errorf("another run (pid %d) is still running; stop it first (record: %s)", old.Runner.PID, path)
			}
			c, err := old.cleanUp()
			if err != nil {
				return nil, nil, err
			}
			cleaned = c
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, nil, err
	}
	self, err := procIDOf(os.Getpid())
	if err != nil {
		return nil, nil, err
	}
	r := &RunRecord{path: path, rec: runRecord{Runner: self, Dir: dir}}
	if err := r.save(); err != nil {
		return nil, nil, err
	}
	return r, cleaned, nil
}

// Track adds processes to the record.
func (r *RunRecord) Track(pids ...int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, pid := range pids {
		id, err := procIDOf(pid)
		if err != nil {
			continue // already gone
		}
		r.rec.Children = append(r.rec.Children, id)
	}
	return r.saveLocked()
}

// TrackChildren adds every current child process of this process (the API
// servers and etcd that envtest started, and the binaries) to the record.
func (r *RunRecord) TrackChildren() error {
	pids, err := childrenOf(os.Getpid())
	if err != nil {
		return err
	}
	return r.Track(pids...)
}

// Release removes the record; call it after everything was stopped and the
// folder removed.
func (r *RunRecord) Release() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := os.Remove(r.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

func (r *RunRecord) save() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.saveLocked()
}

func (r *RunRecord) saveLocked() error {
	b, err := json.MarshalIndent(r.rec, "", "  ")
	if err != nil {
		return err
	}
	tmp := r.path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, r.path)
}

// cleanUp kills the recorded children that are still the same processes,
// waits until they are gone, and removes the folder.
func (old runRecord) cleanUp() ([]string, error) {
	var cleaned []string
	var killed []procID
	for _, c := range old.Children {
		if !c.alive() {
			continue
		}
		_ = syscall.Kill(-c.PID, syscall.SIGKILL) // its group, when it leads one
		_ = syscall.Kill(c.PID, syscall.SIGKILL)
		killed = append(killed, c)
		cleaned = append(cleaned, fmt.Sprintf("killed process %d left by run %d", c.PID, old.Runner.PID))
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range killed {
		for c.alive() {
			if time.Now().After(deadline) {
				return cleaned, fmt.Errorf("process %d left by run %d survived SIGKILL", c.PID, old.Runner.PID)
			}
			time.Sleep(10 * time.Millisecond) // the kernel tears it down; init reaps it
		}
	}
	if old.Dir != "" {
		if _, err := os.Stat(old.Dir); err == nil {
			if err := os.RemoveAll(old.Dir); err != nil {
				return cleaned, err
			}
			cleaned = append(cleaned, fmt.Sprintf("removed %s left by run %d", old.Dir, old.Runner.PID))
		}
	}
	return cleaned, nil
}

// alive reports whether the process still runs and is the one recorded (not
// a zombie, not a new process with a reused pid).
func (p procID) alive() bool {
	cur, state, err := readStat(p.PID)
	return err == nil && cur.Start == p.Start && state != "Z"
}

func procIDOf(pid int) (procID, error) {
	id, _, err := readStat(pid)
	return id, err
}

// readStat reads the start time and state of a process from /proc.
func readStat(pid int) (procID, string, error) {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return procID{}, "", err
	}
	// pid (comm) state ppid ...: comm may contain spaces and parentheses.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return procID{}, "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return procID{}, "", fmt.Errorf("/proc/%d/stat: unexpected format", pid)
	}
	start, err := strconv.ParseUint(f[19], 10, 64) // field 22 of the whole line
	if err != nil {
		return procID{}, "", fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return procID{PID: pid, Start: start}, f[0], nil
}

// childrenOf lists the pids whose parent is pid.
func childrenOf(pid int) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		if f := strings.Fields(s[i+1:]); len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out, nil
}
