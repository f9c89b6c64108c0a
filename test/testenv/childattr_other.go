//go:build !linux

package testenv

import "syscall"

// dyingWithParent: only Linux has a parent-death signal.
func dyingWithParent() *syscall.SysProcAttr { return nil }
