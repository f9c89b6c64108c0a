// Package filewatch reloads the files a binary reads while it runs — TLS
// key pairs (KeyPair), CA bundles (ParseCABundle) and skr-webhook's managers
// file — in one way, modelled on controller-runtime's certwatcher.
//
// A Watcher watches the directories of its files with fsnotify (inotify on
// Linux): a Kubernetes Secret or ConfigMap volume is updated by kubelet
// writing a new timestamped directory and atomically renaming the symlink
// ..data to it, so the file (a symlink through ..data) itself never changes
// and a watch on the file would see nothing or be lost; events in the
// directory are seen. It also re-reads the files every Interval, so a missed
// event (or a directory that cannot be watched) delays a reload by at most
// Interval. Files whose content did not change are not loaded again.
//
// New content is handed to Load; when Load refuses it (or a file cannot be
// read) what is in use stays, and the problem is logged once per distinct
// content or error — a bad file never replaces a good one (fail closed).
package filewatch

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/go-logr/logr"
)

// DefaultInterval is a Watcher's default poll interval.
const DefaultInterval = 10 * time.Second

// debounce: a reload waits this long after the last file event, so a
// writer that truncates and writes in place is read once it is done.
const debounce = 100 * time.Millisecond

// Outcome of reading changed files, for Report.
type Outcome int

const (
	// Loaded: Load took the new content; it is in use.
	Loaded Outcome = iota
	// Failed: a file could not be read or Load refused its content; what
	// was in use stays.
	Failed
	// InUseAgain: after a failure the files hold the content in use again;
	// nothing was loaded.
	InUseAgain
)

// Watcher reloads a set of files. Set the fields, call Init, then Run.
type Watcher struct {
	// Name says what the files are, in logs ("CA file").
	Name string
	// Paths of the files; Load gets their contents in this order.
	Paths []string
	// Load makes contents the files in use, or refuses them with an error
	// (then what was in use stays). It is called from Init, Reload and
	// Run's goroutine, never concurrently.
	Load func(contents [][]byte) error
	// Report, when set, is told the outcome of every read of changed
	// files (metrics).
	Report func(Outcome, error)
	// Interval between re-reads besides the file events; DefaultInterval
	// when 0.
	Interval time.Duration
	Log      logr.Logger

	// PollOnly: no file events, only the re-reads every Interval (tests).
	PollOnly bool

	mu sync.Mutex // serialises reads and Load
	// seen: the content hash or the read error of the last read, so that
	// unchanged files are neither loaded nor logged again; inUse: the hash
	// of the content Load took last.
	seen, inUse string
}

// Init reads the files and loads them, returning why they cannot be used
// (then nothing is in use: a binary refuses to start). Run does not load
// the same content again.
func (w *Watcher) Init() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	contents, key, err := w.read()
	if err != nil {
		return err
	}
	if err := w.Load(contents); err != nil {
		return err
	}
	w.seen, w.inUse = key, key
	return nil
}

// read returns the files' contents and their key.
func (w *Watcher) read() ([][]byte, string, error) {
	contents := make([][]byte, len(w.Paths))
	h := sha256.New()
	for i, p := range w.Paths {
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, "error:" + err.Error(), err
		}
		contents[i] = data
		var n [8]byte
		for j := range n {
			n[j] = byte(len(data) >> (8 * j))
		}
		h.Write(n[:])
		h.Write(data)
	}
	return contents, "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}

// Reload reads the files once and, when their content changed, loads it.
// It reports whether new content was loaded.
func (w *Watcher) Reload() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	contents, key, err := w.read()
	if key == w.seen {
		return false
	}
	w.seen = key
	switch {
	case err != nil:
		w.report(Failed, err)
		w.Log.Error(err, w.Name+" unreadable; keeping what is in use", "files", w.Paths)
		return false
	case key == w.inUse:
		w.report(InUseAgain, nil)
		w.Log.Info(w.Name+" holds what is in use again", "files", w.Paths)
		return false
	}
	if err := w.Load(contents); err != nil {
		w.report(Failed, err)
		w.Log.Error(err, w.Name+" changed but is unusable; keeping what is in use", "files", w.Paths)
		return false
	}
	w.inUse = key
	w.report(Loaded, nil)
	w.Log.Info(w.Name+" reloaded; the new content is in use", "files", w.Paths)
	return true
}

func (w *Watcher) report(o Outcome, err error) {
	if w.Report != nil {
		w.Report(o, err)
	}
}

// Run watches until ctx ends and returns nil then; directories that cannot
// be watched are logged, and the files are polled only.
func (w *Watcher) Run(ctx context.Context) error {
	interval := w.Interval
	if interval <= 0 {
		interval = DefaultInterval
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	dirs := map[string]bool{}
	for _, p := range w.Paths {
		dirs[filepath.Dir(p)] = true
	}
	if !w.PollOnly {
		if fw, err := fsnotify.NewWatcher(); err != nil {
			w.Log.Error(err, "cannot watch the directories of the "+w.Name+"; polling only", "files", w.Paths, "interval", interval.String())
		} else {
			defer fw.Close()
			watched := true
			for d := range dirs {
				if err := fw.Add(d); err != nil {
					w.Log.Error(err, "cannot watch a directory of the "+w.Name+"; polling only", "dir", d, "interval", interval.String())
					watched = false
				}
			}
			if watched {
				events, errs = fw.Events, fw.Errors
			}
		}
	}
	w.Log.Info("watching the "+w.Name, "files", w.Paths, "interval", interval.String(), "fsnotify", events != nil)

	// A change between Init and the watch is seen by this read.
	w.Reload()
	poll := time.NewTicker(interval)
	defer poll.Stop()
	settle := time.NewTimer(debounce)
	settle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-poll.C:
			w.Reload()
		case <-settle.C:
			w.Reload()
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			w.Log.V(1).Info(w.Name+" directory event", "event", ev.String())
			settle.Reset(debounce)
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			w.Log.Error(err, "watching the directories of the "+w.Name+"; still polled", "files", w.Paths)
		}
	}
}

// Start is Run, for a controller-runtime manager (manager.Runnable).
func (w *Watcher) Start(ctx context.Context) error { return w.Run(ctx) }

// NeedLeaderElection: every replica reloads its files.
func (w *Watcher) NeedLeaderElection() bool { return false }
