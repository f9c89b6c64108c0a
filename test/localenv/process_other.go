//go:build !linux

package localenv

import (
	"os"
	"syscall"
)

// childAttr puts a child in its own process group. Only Linux can also have
// the kernel kill it when the runner dies; elsewhere the next run's
// ClaimRun cleans up.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

// ExecDyingWithParent replaces this process with binary; outside Linux the
// kernel cannot tie its life to the parent's.
func ExecDyingWithParent(binary string, args []string, _ int) error {
	return syscall.Exec(binary, args, os.Environ())
}
