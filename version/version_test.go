package version

import (
	"bytes"
	"flag"
	"runtime/debug"
	"strings"
	"testing"
)

func TestFromBuildInfo(t *testing.T) {
	for _, tt := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want string
	}{
		{"no build info", nil, false, "devel"},
		{"module version", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, true, "v1.2.3"},
		{"devel without VCS", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, true, "devel"},
		{"VCS revision", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef0123"}, {Key: "vcs.modified", Value: "false"}}}, true, "devel+0123456789ab"},
		{"modified tree", &debug.BuildInfo{Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "abc"}, {Key: "vcs.modified", Value: "true"}}}, true, "devel+abc-dirty"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := fromBuildInfo(tt.bi, tt.ok); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLinkerVersionWins(t *testing.T) {
	old := Version
	t.Cleanup(func() { Version = old })
	Version = "v9.9.9"
	if Get() != "v9.9.9" {
		t.Fatalf("Get() = %q", Get())
	}
	var buf bytes.Buffer
	Print(&buf, "ext-authz")
	if !strings.HasPrefix(buf.String(), "ext-authz v9.9.9 (go") {
		t.Fatalf("Print wrote %q", buf.String())
	}
}

func TestBindFlag(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	v := BindFlag(fs)
	if err := fs.Parse([]string{"--version"}); err != nil || !*v {
		t.Fatalf("--version: %v %v", *v, err)
	}
}
