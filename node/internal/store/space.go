package store

import (
	"errors"
	"fmt"
)

// Disk space. Badger writes its memtables (and value log) through memory
// maps of files it creates at full size, sparse: a filesystem that runs
// out of space under such a write does not fail it, it kills the process
// with SIGBUS. So the store refuses a write, with ErrDiskFull, before free
// space falls below what Badger may still write into the maps it holds
// and the next memtable it opens (DefaultMinFree). The money path then
// fails its lease with that reason instead of the daemon crashing.

// memTableSize is the size of each Badger memtable (Open).
const memTableSize = 8 << 20

// DefaultMinFree is the least free space, in bytes, on the store's
// filesystem for a write to go ahead: two memtables and 4 MiB more.
const DefaultMinFree = 2*memTableSize + 4<<20

// ErrDiskFull is returned by a write when the store's filesystem has less
// free space than the store's minimum (Options.MinFree).
var ErrDiskFull = errors.New("store: disk nearly full")

// checkSpace returns ErrDiskFull when the store's filesystem has less
// than s.minFree bytes free. A filesystem whose free space cannot be read
// is not refused.
func (s *Store) checkSpace() error {
	if s.minFree <= 0 {
		return nil
	}
	f := freeBytes
	if p := s.free.Load(); p != nil {
		f = *p
	}
	free, err := f(s.dir)
	if err != nil || free >= uint64(s.minFree) {
		return nil
	}
	return fmt.Errorf("%w: %d KiB free in %s, the store needs %d KiB", ErrDiskFull, free>>10, s.dir, s.minFree>>10)
}

// SetFreeBytes makes the store read its filesystem's free space with f
// instead of statfs; nil restores statfs. It is for tests of a full disk.
func (s *Store) SetFreeBytes(f func(dir string) (uint64, error)) {
	if f == nil {
		s.free.Store(nil)
		return
	}
	s.free.Store(&f)
}
