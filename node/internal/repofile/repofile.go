// Package repofile names the files of a node's repo that both the daemon
// and its clients touch, and takes the repo's lock. It is shared by node
// and node/client, which must agree on them without importing each other.
package repofile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// Files in a repo directory.
const (
	API      = "api"       // the running daemon's API address (written atomically, removed on exit)
	APIToken = "api.token" // bearer token for the local API (0600)
	LockFile = "repo.lock" // held (flock) by the running daemon
)

// ErrLocked is returned by Lock when another process holds the repo.
var ErrLocked = errors.New("node: repo is in use by another daemon")

// Lock takes an exclusive, non-blocking flock on the repo. The lock dies
// with the process, so a crashed daemon never leaves the repo locked.
func Lock(dir string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(dir, LockFile), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("node: open lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (is `suanli daemon` already running there?)", ErrLocked, dir)
		}
		return nil, fmt.Errorf("node: lock repo: %w", err)
	}
	return f, nil
}

// WriteAtomic writes a file so that a reader sees the old or the new
// content whole, synced to disk with its directory.
func WriteAtomic(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("node: write %s: %w", path, err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("node: write %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}
