package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/seed-c8be168e/runtime-watcher/api/contract"
)

// maxManagersFileBytes bounds the managers file.
const maxManagersFileBytes = 64 << 10

// readManagers reads a managers file: one manager per line, blank lines
// and lines starting with # ignored. A line "<manager> heartbeats"
// (contract.ManagerHeartbeats) also opts the manager in to heartbeats,
// returned in heartbeats. A name that is not a DNS-1123 label, or any other
// word after it, is an error (vs-controller renders only valid lines).
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

// watchManagers re-reads the managers file every interval until ctx ends
// and hands a changed list to sink. A file that cannot be read keeps the
// last list (logged once per change of error).
func watchManagers(ctx context.Context, path string, interval time.Duration, sink managerSink, log logr.Logger) {
	var last []byte
	var lastErr string
	load := func() {
		data, err := os.ReadFile(path)
		if err == nil && bytes.Equal(data, last) {
			return
		}
		names, heartbeats, perr := readManagers(path)
		if err == nil {
			err = perr
		}
		if err != nil && names == nil {
			if err.Error() != lastErr {
				log.Error(err, "managers file unreadable; keeping the managers known so far", "path", path)
				lastErr = err.Error()
			}
			return
		}
		if err != nil && err.Error() != lastErr {
			log.Error(err, "managers file has invalid lines; they are ignored", "path", path)
			lastErr = err.Error()
		}
		last = data
		sink.SetManagers(names)
		sink.SetHeartbeats(heartbeats)
		log.Info("managers file read", "path", path, "managers", names, "heartbeats", heartbeats)
	}
	load()
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			load()
		}
	}
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
