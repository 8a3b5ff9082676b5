package repo

import (
	"errors"
	"path/filepath"
	"testing"

	"github.com/suanli/suanli/node/internal/repofile"
)

func TestOpen(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "repo")
	if _, _, err := Open(dir, false, nil); !errors.Is(err, ErrNotInitialized) {
		t.Fatalf("Open of no repo without autoInit: %v; want ErrNotInitialized", err)
	}
	lock, cfg, err := Open(dir, true, nil)
	if err != nil {
		t.Fatalf("Open with autoInit: %v", err)
	}
	if !IsInitialized(dir) || cfg.Region != DefaultConfig().Region {
		t.Fatalf("autoInit did not write the default repo: initialized=%v cfg=%+v", IsInitialized(dir), cfg)
	}
	// A second daemon on the same repo is refused while the first holds it.
	if _, _, err := Open(dir, true, nil); !errors.Is(err, repofile.ErrLocked) {
		t.Fatalf("second Open while locked: %v; want ErrLocked", err)
	}
	lock.Close()
	lock2, _, err := Open(dir, false, nil)
	if err != nil {
		t.Fatalf("Open after the lock was released: %v", err)
	}
	lock2.Close()
}
