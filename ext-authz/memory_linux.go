package main

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// madvPageout is MADV_PAGEOUT (Linux 5.4+), not in package syscall.
const madvPageout = 21

// releaseStartupPages asks the kernel to reclaim the resident pages of the
// executable's read-only mappings (code and read-only data). Much of them
// ran only once, during package initialisation (API type registration of
// client-go and Envoy's protos); the pages still needed fault back in on
// use. It returns the number of bytes advised; errors (e.g. an older
// kernel) leave memory as it was.
func releaseStartupPages() (int, error) {
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return 0, err
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	total := 0
	sc := bufio.NewScanner(bytes.NewReader(maps))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || f[5] != exe || strings.Contains(f[1], "w") {
			continue
		}
		from, to, ok := strings.Cut(f[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(from, 16, 64)
		end, err2 := strconv.ParseUint(to, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, uintptr(start), uintptr(end-start), madvPageout); errno != 0 {
			return total, errno
		}
		total += int(end - start)
	}
	return total, sc.Err()
}
