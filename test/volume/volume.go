// Package volume writes files as kubelet updates a Secret or ConfigMap
// volume (its AtomicWriter): the data goes into a new hidden timestamped
// directory, the symlink ..data is switched to it with one rename, each
// file is a symlink <name> -> ..data/<name> created once, and the directory
// before is removed. A reader never sees a partly written file, and a watch
// on the file itself sees no change: only the directory's entries change.
package volume

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Dir is a volume's mount directory.
type Dir struct {
	Path string

	mu      sync.Mutex
	n       int
	current string // the timestamped directory ..data points to
}

// New makes the mount directory (it may exist).
func New(path string) (*Dir, error) {
	if err := os.MkdirAll(path, 0o700); err != nil {
		return nil, err
	}
	return &Dir{Path: path}, nil
}

// File is the path a container reads the file name at.
func (d *Dir) File(name string) string { return filepath.Join(d.Path, name) }

// Write makes files the volume's whole content, atomically.
func (d *Dir) Write(files map[string][]byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n++
	ts := fmt.Sprintf("..2006_01_02_15_04_05.%09d", d.n)
	if err := os.Mkdir(filepath.Join(d.Path, ts), 0o700); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(d.Path, ts, name), data, 0o600); err != nil {
			return err
		}
	}
	tmp := filepath.Join(d.Path, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ts, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(d.Path, "..data")); err != nil {
		return err
	}
	for name := range files {
		link := filepath.Join(d.Path, name)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", name), link); err != nil {
			return err
		}
	}
	if d.current != "" {
		if err := os.RemoveAll(filepath.Join(d.Path, d.current)); err != nil {
			return err
		}
	}
	d.current = ts
	return nil
}
