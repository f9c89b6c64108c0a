package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestMissingFromBounding(t *testing.T) {
	// The machine CI runs on: every capability but CAP_SYS_RESOURCE (bit 24).
	got, err := missingFromBounding("Name:\tx\nCapBnd:\t000001fffeffffff\n")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, []string{"CAP_SYS_RESOURCE"}) {
		t.Fatalf("missing = %v, want [CAP_SYS_RESOURCE]", got)
	}
	got, err = missingFromBounding("CapBnd:\t000001ffffffffff\n")
	if err != nil || len(got) != 0 {
		t.Fatalf("full set: missing = %v, %v; want none", got, err)
	}
	if _, err := missingFromBounding("CapEff:\t0\n"); err == nil {
		t.Fatal("no CapBnd line: want an error")
	}
}

func TestSpecFile(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
		ok   bool
	}{
		// dockerd's and containerd's shim: global flags, then the command.
		{[]string{"--root", "/run/runc", "--log", "/l.json", "--log-format", "json", "--systemd-cgroup", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "/b/config.json", true},
		{[]string{"create", "-b=/b2", "id"}, "/b2/config.json", true},
		{[]string{"run", "id"}, "config.json", true},
		{[]string{"--root", "/r", "exec", "--process", "/tmp/p.json", "--detach", "id"}, "/tmp/p.json", true},
		{[]string{"exec", "id", "sh"}, "", false},
		{[]string{"--root", "/r", "start", "id"}, "", false},
		{[]string{"--version"}, "", false},
	} {
		got, ok := specFile(tc.args)
		if got != tc.want || ok != tc.ok {
			t.Errorf("specFile(%q) = %q, %v; want %q, %v", tc.args, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDropCapsKeepsTheRestOfTheSpec(t *testing.T) {
	spec := `{"ociVersion":"1.2.0","process":{"capabilities":{` +
		`"bounding":["CAP_CHOWN","CAP_SYS_RESOURCE"],"effective":["CAP_SYS_RESOURCE"],"permitted":["CAP_SYS_RESOURCE","CAP_KILL"]},` +
		`"rlimits":[{"type":"RLIMIT_NOFILE","hard":18446744073709551615,"soft":1048576}]},` +
		`"linux":{"resources":{"memory":{"limit":9223372036854775807}}}}`
	dir := t.TempDir()
	file := filepath.Join(dir, "config.json")
	if err := os.WriteFile(file, []byte(spec), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := rewrite(file, []string{"CAP_SYS_RESOURCE"}); err != nil {
		t.Fatal(err)
	}
	out, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	s := string(out)
	if strings.Contains(s, "CAP_SYS_RESOURCE") {
		t.Fatalf("CAP_SYS_RESOURCE left in %s", s)
	}
	for _, want := range []string{`"bounding":["CAP_CHOWN"]`, `"effective":[]`, `"permitted":["CAP_KILL"]`, "18446744073709551615", "9223372036854775807", `"ociVersion":"1.2.0"`} {
		if !strings.Contains(s, want) {
			t.Errorf("rewritten spec lacks %s: %s", want, s)
		}
	}

	// An exec --process file has the capabilities at its top level.
	proc, changed, err := dropCaps([]byte(`{"args":["sh"],"capabilities":{"bounding":["CAP_SYS_RESOURCE"]}}`), []string{"CAP_SYS_RESOURCE"})
	if err != nil || !changed || strings.Contains(string(proc), "CAP_SYS_RESOURCE") {
		t.Fatalf("process file: %s, changed %v, %v", proc, changed, err)
	}
	// Nothing to drop: the file is left byte for byte.
	same, changed, err := dropCaps([]byte(`{"process":{"capabilities":{"bounding":["CAP_KILL"]}}}`), []string{"CAP_SYS_RESOURCE"})
	if err != nil || changed || string(same) != `{"process":{"capabilities":{"bounding":["CAP_KILL"]}}}` {
		t.Fatalf("unchanged spec: %s, changed %v, %v", same, changed, err)
	}
}
