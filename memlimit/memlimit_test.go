package memlimit

import (
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"testing"
)

// fakeCgroup writes files (path relative to a temp root) and returns the root.
func fakeCgroup(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

// restoreLimit puts the process's soft limit back after a test.
func restoreLimit(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
}

func noEnv(string) string { return "" }

func TestCgroupLimit(t *testing.T) {
	for _, tt := range []struct {
		name    string
		files   map[string]string
		want    int64
		wantErr bool
	}{
		{"v2 limit", map[string]string{"memory.max": "268435456\n"}, 256 << 20, false},
		{"v2 no limit", map[string]string{"memory.max": "max\n"}, 0, false},
		{"v1 limit", map[string]string{"memory/memory.limit_in_bytes": "134217728\n"}, 128 << 20, false},
		{"v1 no limit", map[string]string{"memory/memory.limit_in_bytes": "9223372036854771712\n"}, 0, false},
		{"v2 before v1", map[string]string{"memory.max": "1048576", "memory/memory.limit_in_bytes": "2097152"}, 1 << 20, false},
		{"no cgroup", nil, 0, false},
		{"garbage", map[string]string{"memory.max": "lots"}, 0, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CgroupLimit(fakeCgroup(t, tt.files))
			if (err != nil) != tt.wantErr {
				t.Fatalf("error %v, want error: %v", err, tt.wantErr)
			}
			if got != tt.want {
				t.Fatalf("limit %d, want %d", got, tt.want)
			}
		})
	}
}

func TestApplySetsNinetyPercentOfTheCgroupLimit(t *testing.T) {
	restoreLimit(t)
	root := fakeCgroup(t, map[string]string{"memory.max": "104857600\n"}) // 100 MiB
	limit, src, err := Apply(noEnv, root, DefaultRatio)
	if err != nil || src != SourceCgroup {
		t.Fatalf("Apply: %d %s %v", limit, src, err)
	}
	if want := int64(0.9 * 104857600); limit != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("soft limit %d (runtime: %d), want %d", limit, debug.SetMemoryLimit(-1), want)
	}
}

func TestApplyLeavesGOMEMLIMITAlone(t *testing.T) {
	restoreLimit(t)
	debug.SetMemoryLimit(200 << 20) // what Go made of GOMEMLIMIT at start
	root := fakeCgroup(t, map[string]string{"memory.max": "104857600\n"})
	env := func(k string) string {
		if k == "GOMEMLIMIT" {
			return "200MiB"
		}
		return ""
	}
	limit, src, err := Apply(env, root, DefaultRatio)
	if err != nil || src != SourceEnv || limit != 200<<20 || debug.SetMemoryLimit(-1) != 200<<20 {
		t.Fatalf("Apply with GOMEMLIMIT: %d %s %v; runtime limit %d", limit, src, err, debug.SetMemoryLimit(-1))
	}
}

func TestApplyWithoutCgroupLimitChangesNothing(t *testing.T) {
	restoreLimit(t)
	debug.SetMemoryLimit(math.MaxInt64)
	limit, src, err := Apply(noEnv, fakeCgroup(t, map[string]string{"memory.max": "max"}), DefaultRatio)
	if err != nil || src != SourceNone || limit != math.MaxInt64 {
		t.Fatalf("Apply: %d %s %v", limit, src, err)
	}
	if _, _, err := Apply(noEnv, t.TempDir(), 1.5); err == nil {
		t.Fatal("ratio 1.5 accepted")
	}
	if String(math.MaxInt64) != "none" || String(90<<20) != "90.0MiB" {
		t.Fatalf("String: %s %s", String(math.MaxInt64), String(90<<20))
	}
}

func TestApplyTakesNinetyPercentOfMEMORY_LIMIT(t *testing.T) {
	restoreLimit(t)
	root := fakeCgroup(t, map[string]string{"memory.max": "max"})
	env := func(k string) string {
		if k == ContainerLimitEnv {
			return "134217728" // 128Mi, as the downward API writes it
		}
		return ""
	}
	limit, src, err := Apply(env, root, DefaultRatio)
	limitBytes := float64(134217728)
	if want := int64(limitBytes * DefaultRatio); err != nil || src != SourceLimit || limit != want || debug.SetMemoryLimit(-1) != want {
		t.Fatalf("Apply with %s: %d %s %v; runtime limit %d", ContainerLimitEnv, limit, src, err, debug.SetMemoryLimit(-1))
	}
	bad := func(k string) string {
		if k == ContainerLimitEnv {
			return "128Mi"
		}
		return ""
	}
	if _, src, _ := Apply(bad, fakeCgroup(t, map[string]string{"memory.max": "104857600"}), DefaultRatio); src != SourceCgroup {
		t.Fatalf("unparsable %s: source %s, want the cgroup", ContainerLimitEnv, src)
	}
}
