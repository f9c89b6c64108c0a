package localenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The tests start this test binary as a small runner (fakeRun) built from
// the same helpers as `make run` (NotifyStop, ClaimRun, startProcess), with
// `sleep` as its children instead of API servers and binaries.
const envFakeRun = "LOCALENV_FAKE_RUN_STATE_DIR"

func TestMain(m *testing.M) {
	if stateDir := os.Getenv(envFakeRun); stateDir != "" {
		if err := fakeRun(stateDir); err != nil {
			fmt.Fprintln(os.Stderr, "fake run:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeRun does what test/run does: claim the run, start children, print
// "ready <dir> <pid>..." and then a line every few milliseconds until
// stopped, then clean up first and print after.
func fakeRun(stateDir string) error {
	ctx, stop := NotifyStop(context.Background())
	defer stop()
	dir, err := os.MkdirTemp("", "localenv-fake-run-")
	if err != nil {
		return err
	}
	record, _, err := ClaimRun(stateDir, dir)
	if err != nil {
		return err
	}
	var procs []*process
	pids := []string{}
	for i := range 2 {
		p, err := startProcess(dir, fmt.Sprintf("sleep-%d", i), "sleep", nil, nil, "300")
		if err != nil {
			return err
		}
		procs = append(procs, p)
		pids = append(pids, strconv.Itoa(p.pid()))
	}
	if err := record.TrackChildren(); err != nil {
		return err
	}
	fmt.Println("ready", dir, strings.Join(pids, " "))
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for ctx.Err() == nil {
		select {
		case <-ctx.Done():
		case <-tick.C:
			fmt.Println("still running") // fails with EPIPE once stdout's reader is gone
		}
	}
	var errs []error
	for _, p := range procs {
		errs = append(errs, p.stop())
	}
	errs = append(errs, os.RemoveAll(dir), record.Release())
	fmt.Println("stopped, removed", dir)
	return errors.Join(errs...)
}

type fakeRunner struct {
	cmd  *exec.Cmd
	dir  string
	pids []int
	out  *os.File // read end of its stdout
}

// startFakeRun starts the fake runner in its own process group, as a
// terminal would start `make run | tee`, and waits for its "ready" line.
func startFakeRun(t *testing.T, stateDir string) *fakeRunner {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(os.Environ(), envFakeRun+"="+stateDir)
	cmd.Stdout = w
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	_ = w.Close()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = r.Close()
	})
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("fake run: no ready line: %v", err)
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "ready" {
		t.Fatalf("fake run: unexpected first line %q", line)
	}
	fr := &fakeRunner{cmd: cmd, dir: f[1], out: r}
	for _, s := range f[2:] {
		pid, _ := strconv.Atoi(s)
		fr.pids = append(fr.pids, pid)
		if !processRuns(pid) {
			t.Fatalf("child %d of the fake run is not running", pid)
		}
	}
	return fr
}

// processRuns reports whether pid is a live process (not a zombie).
func processRuns(pid int) bool {
	_, state, err := readStat(pid)
	return err == nil && state != "Z"
}

// waitGone waits until pid no longer runs; the kernel kills such children
// asynchronously, so this polls with a deadline.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for processRuns(pid) {
		if time.Now().After(deadline) {
			t.Fatalf("process %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestRunCleansUpWhenStdoutIsClosedAndCtrlC(t *testing.T) {
	stateDir := t.TempDir()
	fr := startFakeRun(t, stateDir)

	// Ctrl-C with `| tee`: the reader of stdout goes away, and SIGINT
	// reaches the runner's whole process group.
	_ = fr.out.Close()
	if err := syscall.Kill(-fr.cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := fr.cmd.Wait()
	if err != nil {
		t.Errorf("fake run ended with %v, want a clean exit", err)
	}
	for _, pid := range fr.pids {
		if processRuns(pid) {
			t.Errorf("child %d survived the run", pid)
		}
	}
	if _, err := os.Stat(fr.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run's folder %s is still there (%v)", fr.dir, err)
	}
	if _, err := os.Stat(filepath.Join(stateDir, runRecordFile)); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the run's record is still there (%v)", err)
	}
}

func TestNextRunCleansUpAfterAKilledRun(t *testing.T) {
	stateDir := t.TempDir()
	fr := startFakeRun(t, stateDir)

	if err := fr.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = fr.cmd.Wait()
	// The children die with the runner (parent-death signal)...
	for _, pid := range fr.pids {
		waitGone(t, pid)
	}
	// ... but its folder and record stay until the next run.
	if _, err := os.Stat(fr.dir); err != nil {
		t.Fatalf("the killed run's folder: %v", err)
	}

	next := startFakeRun(t, stateDir)
	if _, err := os.Stat(fr.dir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the next run left the killed run's folder %s (%v)", fr.dir, err)
	}
	if next.dir == fr.dir {
		t.Errorf("the next run reuses folder %s", next.dir)
	}
}

func TestClaimRunKillsOnlyWhatIsStillOurs(t *testing.T) {
	stateDir := t.TempDir()
	startSleep := func() *exec.Cmd {
		cmd := exec.Command("sleep", "300")
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	leftover, stranger := startSleep(), startSleep()
	leftoverID, err := procIDOf(leftover.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	strangerID, err := procIDOf(stranger.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	strangerID.Start-- // the recorded process had this pid before; this one is another
	oldDir := t.TempDir()
	writeRecord(t, stateDir, runRecord{
		Runner:   procID{PID: leftover.Process.Pid, Start: leftoverID.Start + 1}, // gone: a pid now used by another process
		Dir:      oldDir,
		Children: []procID{leftoverID, strangerID},
	})
	exited := make(chan error, 1)
	go func() { exited <- leftover.Wait() }()

	r, cleaned, err := ClaimRun(stateDir, "new-dir")
	if err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if !strings.Contains(fmt.Sprint(err), "killed") {
			t.Errorf("the leftover ended with %v, want killed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the recorded leftover was not killed")
	}
	if !processRuns(stranger.Process.Pid) {
		t.Error("a process that only shares a recorded pid was killed")
	}
	if _, err := os.Stat(oldDir); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the old run's folder is still there (%v)", err)
	}
	if len(cleaned) != 2 {
		t.Errorf("cleaned = %q, want the killed process and the removed folder", cleaned)
	}
	if err := r.Release(); err != nil {
		t.Fatal(err)
	}
}

func TestClaimRunRefusesWhileThePreviousRunnerRuns(t *testing.T) {
	stateDir := t.TempDir()
	cmd := exec.Command("sleep", "300")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	runner, err := procIDOf(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	writeRecord(t, stateDir, runRecord{Runner: runner, Dir: dir})

	if _, _, err := ClaimRun(stateDir, "new-dir"); err == nil || !strings.Contains(err.Error(), "still running") {
		t.Fatalf("ClaimRun = %v, want an error: the previous run is still running", err)
	}
	if _, err := os.Stat(dir); err != nil {
		t.Errorf("the running run's folder was touched: %v", err)
	}
}

func writeRecord(t *testing.T, stateDir string, rec runRecord) {
	t.Helper()
	b, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(stateDir, runRecordFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}
