//go:build !linux

package loadgen

import (
	"errors"
	"time"
)

// ProcessCPU reads the CPU clock of process pid; Linux only.
func ProcessCPU(pid int) (time.Duration, error) {
	return 0, errors.New("loadgen: a process's CPU clock is read on Linux only")
}
