package testenv

import "syscall"

// dyingWithParent has the kernel kill a child when the test process dies,
// even by SIGKILL.
func dyingWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
