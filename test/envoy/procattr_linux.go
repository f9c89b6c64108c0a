package envoy

import "syscall"

// procAttr puts Envoy in its own process group and has the kernel kill it
// when the test process dies, even by SIGKILL.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
