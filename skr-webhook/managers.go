package main

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
	"github.com/seed-c8be168e/runtime-watcher/filewatch"
)

// maxManagersFileBytes bounds the managers file.
const maxManagersFileBytes = 64 << 10

// readManagers reads a managers file (parseManagers).
func readManagers(path string) (names, heartbeats []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxManagersFileBytes+1))
	if err != nil {
		return nil, nil, err
	}
	return parseManagers(path, data)
}

// parseManagers parses a managers file: one manager per line, blank lines
// and lines starting with # ignored. A line "<manager> heartbeats"
// (contract.ManagerHeartbeats) also opts the manager in to heartbeats,
// returned in heartbeats. A name that is not a DNS-1123 label, or any other
// word after it, is an error (vs-controller renders only valid lines).
func parseManagers(path string, data []byte) (names, heartbeats []string, err error) {
	if len(data) > maxManagersFileBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d bytes", path, maxManagersFileBytes)
	}
	var errs []error
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, opt, hasOpt := strings.Cut(line, " ")
		opt = strings.TrimSpace(opt)
		switch {
		case !contract.ValidManager(name):
			errs = append(errs, fmt.Errorf("%s:%d: %q is not a valid manager name", path, i+1, name))
			continue
		case hasOpt && opt != contract.ManagerHeartbeats:
			errs = append(errs, fmt.Errorf("%s:%d: %q after the manager name is not %q", path, i+1, opt, contract.ManagerHeartbeats))
			continue
		}
		names = append(names, name)
		if hasOpt {
			heartbeats = append(heartbeats, name)
		}
	}
	return names, heartbeats, errors.Join(errs...)
}

// managerSink takes the managers the webhook knows.
type managerSink interface {
	SetManagers([]string)
	SetHeartbeats([]string)
	SeeManager(string)
}

// managersWatcher re-reads the managers file (filewatch) and hands a
// changed list to sink. A file that cannot be read, or names no valid
// manager while it has invalid lines, keeps the last list; invalid lines
// beside valid ones are logged and ignored.
func managersWatcher(path string, interval time.Duration, sink managerSink, log logr.Logger) *filewatch.Watcher {
	return &filewatch.Watcher{Name: "managers file", Paths: []string{path}, Interval: interval, Log: log,
		Load: func(contents [][]byte) error {
			names, heartbeats, err := parseManagers(path, contents[0])
			if err != nil && names == nil {
				return err
			}
			if err != nil {
				log.Error(err, "managers file has invalid lines; they are ignored", "path", path)
			}
			sink.SetManagers(names)
			sink.SetHeartbeats(heartbeats)
			log.Info("managers file read", "path", path, "managers", names, "heartbeats", heartbeats)
			return nil
		}}
}

// seeManagers records the manager of every POST /validate/<manager> before
// the admission handler runs, so a manager the managers file does not name
// (yet) still gets its startup resync and heartbeats.
func seeManagers(sink managerSink, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost {
			if m, ok := contract.ManagerFromValidatePath(r.URL.Path); ok {
				sink.SeeManager(m)
			}
		}
		next.ServeHTTP(w, r)
	})
}
