package sidecar

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
)

// LeaderFile is a file that exists, holding the fencing token, only while
// this process leads (Hold). It is written when leadership begins and
// removed when it ends, before the key is released, so that another
// candidate never leads while the file is there (unless this process is
// killed or paused while leading: see docs/sidecar.md).
type LeaderFile struct {
	path string
	log  *slog.Logger
}

// OpenLeaderFile returns the leader file at path, having removed a file an
// earlier process left there (it was killed while it led: this process
// does not lead yet), which it logs to log.
func OpenLeaderFile(path string, log *slog.Logger) (*LeaderFile, error) {
	f := &LeaderFile{path: path, log: log}
	return f, f.clear()
}

// Path is the file's path.
func (f *LeaderFile) Path() string { return f.path }

// CheckLeaderFile says what is wrong with path as a leader file, before
// anything connects: its directory must exist and take new files, and
// path must not be a directory.
func CheckLeaderFile(path string) error {
	if info, err := os.Stat(path); err == nil && info.IsDir() {
		return errors.New("is a directory; want the path of a file")
	}
	dir := filepath.Dir(path)
	info, err := os.Stat(dir)
	switch {
	case err != nil:
		return fmt.Errorf("directory %q: %v", dir, errors.Unwrap(err))
	case !info.IsDir():
		return fmt.Errorf("%q is not a directory", dir)
	}
	// Only trying tells whether the directory takes new files: permissions,
	// a read-only file system, ACLs.
	probe, err := os.CreateTemp(dir, "."+filepath.Base(path)+".check*")
	if err != nil {
		return fmt.Errorf("cannot create files in %q: %v", dir, errors.Unwrap(err))
	}
	probe.Close()
	os.Remove(probe.Name())
	return nil
}

// clear removes a file left at the path by an earlier process that was
// killed while it led: this process does not lead yet.
func (f *LeaderFile) clear() error {
	err := os.Remove(f.path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("removing the file an earlier process left: %w", err)
	}
	f.log.Warn("removed a leader file an earlier process left behind", "leader_file", f.path)
	return nil
}

// Hold writes token to the file, and removes the file when leading is done
// or drop is called, whichever comes first; drop returns once the file is
// gone. A leader calls drop before it returns from OnWon, so the file is
// gone before the key is released. A file that cannot be written is logged
// and leadership goes on without it: a missing file only ever says "not
// leading".
func (f *LeaderFile) Hold(leading context.Context, token uint64) (drop func()) {
	log := f.log.With("leader_file", f.path, "token", token)
	if err := writeFileAtomic(f.path, fmt.Appendf(nil, "%d\n", token)); err != nil {
		log.Error("could not write the leader file", "error", err)
	}
	ctx, cancel := context.WithCancel(leading)
	removed := make(chan struct{})
	go func() {
		defer close(removed)
		<-ctx.Done()
		if err := os.Remove(f.path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			log.Error("could not remove the leader file although this process no longer leads", "error", err)
		}
	}()
	return func() {
		cancel()
		<-removed
	}
}

// writeFileAtomic replaces the file at path with one holding data, so that
// a reader sees the whole file or none: it writes a temporary file in the
// same directory and renames it over path. The file is readable by all, as
// another container reading a shared volume may run as another user.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	err = errors.Join(err, tmp.Chmod(0o644), tmp.Close())
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}
