package loadgen

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// ProcessCPU reads the CPU clock of process pid: the user and system time
// of all its threads, to the nanosecond (clock_gettime of the process's
// CPU-time clock, which Linux lets any process read; the utime + stime of
// /proc/<pid>/stat are the same time in 10 ms ticks).
func ProcessCPU(pid int) (time.Duration, error) {
	if pid <= 0 || pid >= 1<<28 { // pid_max is at most 2^22
		return 0, fmt.Errorf("loadgen: no process %d", pid)
	}
	// clock_getcpuclockid(3): the process-wide CPUCLOCK_SCHED clock of pid.
	clock := int32(^pid<<3 | 2)
	var ts unix.Timespec
	if err := unix.ClockGettime(clock, &ts); err != nil {
		return 0, err
	}
	return time.Duration(ts.Nano()), nil
}
