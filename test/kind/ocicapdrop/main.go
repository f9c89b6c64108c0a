// Command ocicapdrop is an OCI runtime that removes capabilities the host
// cannot grant from a container's spec and then runs runc with the same
// arguments. It exists for hosts whose root lacks a capability in its
// bounding set (CAP_SYS_RESOURCE on the machines CI runs on): there, runc
// fails every privileged container with "unable to apply caps: operation not
// permitted", and kind's nodes — and the privileged pods inside them — are
// all privileged. test/kind/engine.sh makes it dockerd's default runtime on
// such a host, and the kind node image makes it the runtime of its
// containerd (docs/deploying.md, "Installing on kind").
//
// It rewrites the bundle's config.json on `create` and `run`, and the
// --process file on `exec`; every other command is passed through
// untouched. Only the capability sets change: the JSON is decoded with
// numbers kept exact, so nothing else of the spec is altered.
package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
)

// dropEnv names the capabilities to remove (comma-separated, e.g.
// "CAP_SYS_RESOURCE"); unset, the capabilities missing from this process's
// bounding set are removed.
const dropEnv = "OCICAPDROP_CAPS"

// runcEnv names the runc binary to run; unset, the first runc on PATH.
const runcEnv = "OCICAPDROP_RUNC"

// capNames are the Linux capabilities by number (linux/capability.h).
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
	"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK",
	"CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL", "CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG",
	"CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "ocicapdrop: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	drop, err := capsToDrop()
	if err != nil {
		return err
	}
	if file, ok := specFile(args); ok && len(drop) > 0 {
		if err := rewrite(file, drop); err != nil {
			return err
		}
	}
	runc, err := runcPath()
	if err != nil {
		return err
	}
	return syscall.Exec(runc, append([]string{"runc"}, args...), os.Environ())
}

// capsToDrop is OCICAPDROP_CAPS, or the capabilities this process's bounding
// set lacks.
func capsToDrop() ([]string, error) {
	if v, ok := os.LookupEnv(dropEnv); ok {
		return strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ' ' }), nil
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return nil, err
	}
	return missingFromBounding(string(status))
}

// missingFromBounding returns the known capabilities whose bit is clear in
// the CapBnd line of a /proc/<pid>/status text.
func missingFromBounding(status string) ([]string, error) {
	for line := range strings.SplitSeq(status, "\n") {
		v, ok := strings.CutPrefix(line, "CapBnd:")
		if !ok {
			continue
		}
		var mask uint64
		if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &mask); err != nil {
			return nil, fmt.Errorf("CapBnd %q: %w", v, err)
		}
		var out []string
		for i, name := range capNames {
			if mask&(1<<i) == 0 {
				out = append(out, name)
			}
		}
		return out, nil
	}
	return nil, fmt.Errorf("no CapBnd line in /proc/self/status")
}

// globalValueFlags are runc's global flags that take a value as the next
// argument.
var globalValueFlags = []string{"--root", "--log", "--log-format", "--criu", "--rootless"}

// specFile returns the JSON file that carries the capabilities for the runc
// command in args: the bundle's config.json for create and run, the
// --process file for exec.
func specFile(args []string) (string, bool) {
	i := 0
	for i < len(args) && strings.HasPrefix(args[i], "-") {
		if slices.Contains(globalValueFlags, args[i]) {
			i++
		}
		i++
	}
	if i >= len(args) {
		return "", false
	}
	cmd, rest := args[i], args[i+1:]
	switch cmd {
	case "create", "run":
		bundle := flagValue(rest, "--bundle", "-b")
		if bundle == "" {
			bundle = "."
		}
		return filepath.Join(bundle, "config.json"), true
	case "exec":
		p := flagValue(rest, "--process", "-p")
		return p, p != ""
	}
	return "", false
}

// flagValue returns the value of a flag given as "--name v", "--name=v",
// "-n v" or "-n=v".
func flagValue(args []string, long, short string) string {
	for i, a := range args {
		for _, name := range []string{long, short} {
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
		}
	}
	return ""
}

// rewrite removes drop from every capability set of the OCI spec (a
// config.json, whose capabilities are under "process") or process (an exec
// --process file) in file.
func rewrite(file string, drop []string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	out, changed, err := dropCaps(data, drop)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if !changed {
		return nil
	}
	info, err := os.Stat(file)
	if err != nil {
		return err
	}
	tmp := file + ".ocicapdrop"
	if err := os.WriteFile(tmp, out, info.Mode().Perm()); err != nil {
		return err
	}
	return os.Rename(tmp, file)
}

// dropCaps returns the JSON document data without the capabilities drop,
// and whether any was removed.
func dropCaps(data []byte, drop []string) ([]byte, bool, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var doc map[string]any
	if err := dec.Decode(&doc); err != nil {
		return nil, false, err
	}
	process := doc
	if p, ok := doc["process"].(map[string]any); ok {
		process = p
	}
	caps, ok := process["capabilities"].(map[string]any)
	if !ok {
		return data, false, nil
	}
	changed := false
	for set, v := range caps {
		list, ok := v.([]any)
		if !ok {
			continue
		}
		kept := slices.DeleteFunc(slices.Clone(list), func(c any) bool {
			s, ok := c.(string)
			return ok && slices.Contains(drop, s)
		})
		if len(kept) != len(list) {
			caps[set] = kept
			changed = true
		}
	}
	if !changed {
		return data, false, nil
	}
	out, err := json.Marshal(doc)
	return out, true, err
}

// runcPath is OCICAPDROP_RUNC or the first runc on PATH.
func runcPath() (string, error) {
	if p := os.Getenv(runcEnv); p != "" {
		return p, nil
	}
	return exec.LookPath("runc")
}
