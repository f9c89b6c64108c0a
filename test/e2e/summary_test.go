package e2e_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	"github.com/onsi/ginkgo/v2/types"
	"golang.org/x/sys/unix"
)

// `go test ./test/e2e/...` (package-list mode) prints only "ok <package>"
// for a passing package: the go command buffers the test binary's output and
// throws it away unless -v was given to the go command itself (cmd/go,
// testShowPass). Flags after -args, such as -ginkgo.label-filter, reach only
// the test binary, so a caller that selects specs by label cannot see how
// many ran. This report writes Ginkgo's summary line to the go command's own
// standard output as well, when that output would otherwise be lost: the
// suite passed, the test binary runs without -test.v, and its parent is the
// go command. A failing run needs nothing: go prints the whole output then.
var _ = ReportAfterSuite("summary for the go command", func(r Report) {
	if !r.SuiteSucceeded || testing.Verbose() {
		return
	}
	if err := writeToGoCommand(summaryLine(r)); err != nil {
		fmt.Fprintf(os.Stderr, "e2e: could not echo the summary to the go command: %v\n", err)
	}
})

// summaryLine is Ginkgo's own end-of-suite summary.
func summaryLine(r Report) string {
	var passed, failed, pending, skipped int
	for _, s := range r.SpecReports {
		if s.LeafNodeType != types.NodeTypeIt {
			continue
		}
		switch {
		case s.State.Is(types.SpecStatePassed):
			passed++
		case s.State.Is(types.SpecStateFailureStates):
			failed++
		case s.State.Is(types.SpecStatePending):
			pending++
		case s.State.Is(types.SpecStateSkipped):
			skipped++
		}
	}
	return fmt.Sprintf("\n%s: Ran %d of %d Specs in %.3f seconds\nSUCCESS! -- %d Passed | %d Failed | %d Pending | %d Skipped\n",
		r.SuiteDescription, r.PreRunStats.SpecsThatWillRun, r.PreRunStats.TotalSpecs, r.RunTime.Seconds(),
		passed, failed, pending, skipped)
}

// writeToGoCommand writes s to the standard output of the parent process if
// that is the go command. It borrows the parent's descriptor with
// pidfd_getfd(2), so the write shares the go command's file offset and its
// "ok" line follows instead of overwriting. Where that is not permitted
// (ptrace restrictions), it opens /proc/<ppid>/fd/1 for appending: right for
// a pipe or a terminal; for a regular file the go command's next write lands
// at its own offset, so the summary is preceded by a blank line long enough
// to absorb its "ok" line.
func writeToGoCommand(s string) error {
	ppid := os.Getppid()
	exe, err := os.Readlink("/proc/" + strconv.Itoa(ppid) + "/exe")
	if err != nil || filepath.Base(exe) != "go" {
		return nil // not under the go command: our own output is what the caller sees
	}
	if pidfd, err := unix.PidfdOpen(ppid, 0); err == nil {
		defer unix.Close(pidfd)
		if fd, err := unix.PidfdGetfd(pidfd, 1, 0); err == nil {
			f := os.NewFile(uintptr(fd), "go command stdout")
			defer f.Close()
			_, err = f.WriteString(s)
			return err
		}
	}
	f, err := os.OpenFile("/proc/"+strconv.Itoa(ppid)+"/fd/1", os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.Mode().IsRegular() {
		s = fmt.Sprintf("\n%512s%s", "", s)
	}
	_, err = f.WriteString(s)
	return err
}
