// Package memlimit gives a binary a Go soft memory limit that fits its
// container. Go honours GOMEMLIMIT natively; when it is not set, Apply reads
// the container's cgroup memory limit (cgroup v2 memory.max, or v1
// memory.limit_in_bytes) and sets the soft limit to a fraction of it with
// debug.SetMemoryLimit, so the garbage collector works harder before the
// kernel's OOM killer would. Without a cgroup limit nothing changes.
//
// The manifests pass the container's limit through the downward API
// (resourceFieldRef limits.memory) as MEMORY_LIMIT, in bytes; Apply takes the
// same fraction of it (a GOMEMLIMIT equal to the hard limit would leave no
// room for what the Go runtime does not count). GOMEMLIMIT, when set, wins.
package memlimit

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// DefaultRatio is the share of the cgroup limit used as the soft limit: the
// rest is room for what the Go runtime does not count (stacks of exiting
// goroutines, the binary's own pages) before the OOM killer would act.
const DefaultRatio = 0.9

// CgroupRoot is where cgroups are mounted in a container.
const CgroupRoot = "/sys/fs/cgroup"

// unlimited: cgroup v1 reports "no limit" as a page-aligned value near
// MaxInt64; anything this large is no limit.
const unlimited = int64(1) << 62

// Source says where the soft limit came from.
type Source string

const (
	SourceEnv    Source = "GOMEMLIMIT"   // the environment variable; Go applied it
	SourceLimit  Source = "MEMORY_LIMIT" // Apply set it from ContainerLimitEnv
	SourceCgroup Source = "cgroup"       // Apply set it from the cgroup limit
	SourceNone   Source = "none"         // no limit found; Go's default (none)
)

// ContainerLimitEnv is the variable the manifests fill with the container's
// memory limit in bytes (downward API resourceFieldRef limits.memory).
const ContainerLimitEnv = "MEMORY_LIMIT"

// Apply sets the soft memory limit to ratio × getenv(ContainerLimitEnv) when
// that is a positive number of bytes, else to ratio × the cgroup limit found
// under cgroupRoot, unless getenv("GOMEMLIMIT") is set. It returns the limit in
// effect (math.MaxInt64 when none) and where it came from. An unreadable
// cgroup is an error only when a limit file exists but cannot be parsed.
func Apply(getenv func(string) string, cgroupRoot string, ratio float64) (int64, Source, error) {
	if getenv("GOMEMLIMIT") != "" {
		return debug.SetMemoryLimit(-1), SourceEnv, nil
	}
	if ratio <= 0 || ratio > 1 {
		return 0, SourceNone, fmt.Errorf("memory limit ratio %v: want (0, 1]", ratio)
	}
	if v := getenv(ContainerLimitEnv); v != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err == nil && n > 0 && n < unlimited {
			soft := int64(float64(n) * ratio)
			debug.SetMemoryLimit(soft)
			return soft, SourceLimit, nil
		}
		// Not a limit (unset limits.memory gives the node's allocatable):
		// fall back to the cgroup.
	}
	limit, err := CgroupLimit(cgroupRoot)
	if err != nil || limit <= 0 {
		return debug.SetMemoryLimit(-1), SourceNone, err
	}
	soft := int64(float64(limit) * ratio)
	debug.SetMemoryLimit(soft)
	return soft, SourceCgroup, nil
}

// CgroupLimit returns the memory limit in bytes of the cgroup mounted at
// root: v2's memory.max, else v1's memory/memory.limit_in_bytes; 0 when
// there is none ("max", an unlimited value, or no file).
func CgroupLimit(root string) (int64, error) {
	for _, name := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		raw, err := os.ReadFile(filepath.Join(root, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(raw))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", name, err)
		}
		if n <= 0 || n >= unlimited {
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}

// String formats a limit for logs.
func String(limit int64) string {
	if limit <= 0 || limit == math.MaxInt64 {
		return "none"
	}
	return fmt.Sprintf("%.1fMiB", float64(limit)/(1<<20))
}
