package localenv

import (
	"fmt"
	"os"
	"runtime"
	"syscall"
)

// childAttr puts a child in its own process group (Ctrl-C in the terminal
// reaches only the runner, which stops its children in order, and a child
// can be killed with everything it started) and has the kernel kill it when
// the runner dies, even by SIGKILL.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// ExecDyingWithParent replaces this process with binary (argv args), which
// the kernel kills (SIGKILL) when this process's parent dies. It is for
// children that this project does not start itself (envtest starts
// kube-apiserver and etcd): the runner puts a link to itself where envtest
// looks for them, and the link calls this. It returns only on error.
func ExecDyingWithParent(binary string, args []string, parent int) error {
	// The parent-death signal belongs to the thread that sets it and
	// survives execve only on that thread.
	runtime.LockOSThread()
	if _, _, errno := syscall.RawSyscall(syscall.SYS_PRCTL, syscall.PR_SET_PDEATHSIG, uintptr(syscall.SIGKILL), 0); errno != 0 {
		return fmt.Errorf("prctl(PR_SET_PDEATHSIG): %w", errno)
	}
	if os.Getppid() != parent {
		return fmt.Errorf("parent %d already gone", parent) // died before prctl
	}
	return syscall.Exec(binary, args, os.Environ())
}
