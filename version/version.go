// Package version is the version every Runtime Watcher binary reports with
// --version. Release builds set it with the linker:
//
//	go build -ldflags "-X github.com/seed-c8be168e/runtime-watcher/version.Version=v1.2.3" ./ext-authz
//
// Without that it comes from the Go build information: the module version
// (a tagged `go install`), else the VCS revision, else "devel".
package version

import (
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

// Version is set with -ldflags "-X .../version.Version=..."; empty means
// "derive it from the build information".
var Version = ""

// Get returns the version of the running binary.
func Get() string {
	if Version != "" {
		return Version
	}
	return fromBuildInfo(debug.ReadBuildInfo())
}

func fromBuildInfo(bi *debug.BuildInfo, ok bool) string {
	if !ok || bi == nil {
		return "devel"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev, modified string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev == "" {
		return "devel"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	return "devel+" + rev + modified
}

// BindFlag registers --version on fs; when the returned value is true
// after parsing, the binary calls Print and exits 0.
func BindFlag(fs *flag.FlagSet) *bool {
	return fs.Bool("version", false, "print the version and exit")
}

// Print writes "<binary> <version> (<go version>)" to w.
func Print(w io.Writer, binary string) {
	fmt.Fprintf(w, "%s %s (%s)\n", binary, Get(), runtime.Version())
}
