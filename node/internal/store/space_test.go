package store

import (
	"crypto/rand"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/suanli/suanli/proto"
)

// TestWriteRefusedOnFullDisk: with less free space than the store's
// minimum, a money-path write fails with ErrDiskFull and stores nothing;
// with space again it goes through.
func TestWriteRefusedOnFullDisk(t *testing.T) {
	s, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetFreeBytes(func(string) (uint64, error) { return DefaultMinFree - 1, nil })
	err = s.PutReceipt("lease", 1, &proto.SignedReceipt{Receipt: []byte("r")})
	if !errors.Is(err, ErrDiskFull) {
		t.Fatalf("PutReceipt on a full disk = %v, want ErrDiskFull", err)
	}
	if _, err := s.GetReceipt("lease", 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("GetReceipt after the refused write = %v, want ErrNotFound", err)
	}
	if err := s.PutLeaseRecord("lease", []byte("{}")); !errors.Is(err, ErrDiskFull) {
		t.Fatalf("PutLeaseRecord on a full disk = %v, want ErrDiskFull", err)
	}
	// Negative control: with room, the same write is stored.
	s.SetFreeBytes(func(string) (uint64, error) { return DefaultMinFree, nil })
	if err := s.PutReceipt("lease", 1, &proto.SignedReceipt{Receipt: []byte("r")}); err != nil {
		t.Fatalf("PutReceipt with room = %v", err)
	}
	if _, err := s.GetReceipt("lease", 1); err != nil {
		t.Fatalf("GetReceipt = %v", err)
	}
}

// TestFullTmpfs fills a store on a real 40 MiB tmpfs (root only): writes
// go through until the free space nears the minimum, then fail with
// ErrDiskFull; the process never takes SIGBUS in Badger's memory-mapped
// memtable, and what was stored stays readable.
func TestFullTmpfs(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting a tmpfs needs root")
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", dir).Run() })
	s, err := Open(filepath.Join(dir, "datastore"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	val := make([]byte, 64<<10)
	var stored uint64
	for seq := uint64(1); seq < 2000; seq++ {
		rand.Read(val) // incompressible
		err := s.PutReceipt("lease", seq, &proto.SignedReceipt{Receipt: val})
		if errors.Is(err, ErrDiskFull) {
			break
		}
		if err != nil {
			t.Fatalf("PutReceipt %d = %v, want nil or ErrDiskFull", seq, err)
		}
		stored = seq
	}
	if stored == 0 || stored >= 1999 {
		t.Fatalf("stored %d receipts on a 40 MiB tmpfs; want some, then ErrDiskFull", stored)
	}
	if _, err := s.GetReceipt("lease", stored); err != nil {
		t.Errorf("GetReceipt(%d) after the disk filled = %v", stored, err)
	}
}
