//go:build !linux

package envoy

import "syscall"

// procAttr: only Linux has a parent-death signal.
func procAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }
