package main

import "runtime/debug"

// debugBuildInfo lists this program's module dependencies as (path, version).
func debugBuildInfo() ([][2]string, bool) {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return nil, false
	}
	var deps [][2]string
	for _, d := range bi.Deps {
		deps = append(deps, [2]string{d.Path, d.Version})
	}
	return deps, true
}
