package store

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/suanli/suanli/proto"
)

func openTest(t *testing.T, now func() time.Time) *Store {
	t.Helper()
	s, err := Open(t.TempDir(), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: now})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestFailWrites: a fault refuses exactly the writes it names, each
// returning its error, and leaves nothing written; cleared, writes go on.
func TestFailWrites(t *testing.T) {
	s := openTest(t, nil)
	injected := errors.New("injected")
	s.FailWrites(func(k []byte) error {
		if bytes.HasPrefix(k, []byte(prefixReceipt)) {
			return injected
		}
		return nil
	})
	sr := &proto.SignedReceipt{Receipt: []byte("r1")}
	if err := s.PutReceipt("l", 1, sr); !errors.Is(err, injected) {
		t.Fatalf("PutReceipt under a fault = %v, want the injected error", err)
	}
	if _, err := s.GetReceipt("l", 1); !errors.Is(err, ErrNotFound) {
		t.Errorf("GetReceipt after a refused write = %v, want ErrNotFound", err)
	}
	if err := s.PutLease(&proto.Lease{Id: "l"}); err != nil {
		t.Errorf("PutLease (not faulted) = %v", err)
	}
	s.FailWrites(nil)
	if err := s.PutReceipt("l", 1, sr); err != nil {
		t.Fatalf("PutReceipt after clearing the fault = %v", err)
	}
	got, err := s.GetReceipt("l", 1)
	if err != nil || string(got.Receipt) != "r1" {
		t.Errorf("GetReceipt = %v, %v; want r1", got, err)
	}
}

// TestHoldsAndBlocks: holds and forward blocks, their release (which
// reports a failed write) and what counts as held when.
func TestHoldsAndBlocks(t *testing.T) {
	now := time.UnixMilli(1_800_000_000_000)
	s := openTest(t, func() time.Time { return now })
	if err := s.ReserveGPUs([]string{"g1", "g2"}, "a", now.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveGPUs([]string{"g2"}, "b", now.Add(time.Hour)); err == nil || !strings.Contains(err.Error(), "is leased") {
		t.Errorf("ReserveGPUs of a held GPU = %v, want refused", err)
	}
	if err := s.ReserveBlock([]string{"g3"}, "c", now.Add(2*time.Hour), now.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := s.ReserveBlock([]string{"g3"}, "d", now.Add(150*time.Minute), now.Add(4*time.Hour)); err == nil {
		t.Error("ReserveBlock over another block = nil, want refused")
	}
	held, err := s.ReservedGPUs(now)
	if err != nil || len(held) != 2 || !held["g1"] || !held["g2"] {
		t.Errorf("ReservedGPUs(now) = %v, %v; want g1 g2", held, err)
	}
	if h, err := s.GPUHolds(now.Add(150 * time.Minute)); err != nil || h["g3"].Lease != "c" || !h["g3"].Until.Equal(now.Add(3*time.Hour)) {
		t.Errorf("GPUHolds in the block = %v, %v; want g3 held by c until its end", h, err)
	}
	busy, err := s.BusyBetween(now.Add(2*time.Hour+time.Minute), now.Add(5*time.Hour))
	if err != nil || !busy["g3"] || busy["g1"] {
		t.Errorf("BusyBetween = %v, %v; want g3 (block), not g1 (its hold ends first)", busy, err)
	}

	injected := errors.New("injected")
	s.FailWrites(func([]byte) error { return injected })
	if err := s.ReleaseGPUs([]string{"g1", "g2"}, "a"); !errors.Is(err, injected) {
		t.Errorf("ReleaseGPUs under a fault = %v, want the injected error", err)
	}
	s.FailWrites(nil)
	if held, _ := s.ReservedGPUs(now); len(held) != 2 {
		t.Errorf("after a failed release ReservedGPUs = %v, want both still held", held)
	}
	if err := s.ReleaseGPUs([]string{"g1", "g2", "g3"}, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.ReleaseGPUs([]string{"g3"}, "c"); err != nil {
		t.Fatal(err)
	}
	if h, err := s.GPUHolds(now.Add(150 * time.Minute)); err != nil || len(h) != 0 {
		t.Errorf("GPUHolds after release = %v, %v; want none", h, err)
	}
}

func FuzzDecodeHistKey(f *testing.F) {
	prefix := HistPrefix("nvidia-h100-sxm5-80gb", "USD")
	f.Add(HistKey("nvidia-h100-sxm5-80gb", "USD", time.UnixMilli(1_700_000_000_000), "abc"))
	f.Add(prefix)
	f.Add([]byte("hist/x"))
	f.Fuzz(func(t *testing.T, k []byte) {
		at, id, err := DecodeHistKey(prefix, k)
		if err != nil {
			return
		}
		if got := HistKey("nvidia-h100-sxm5-80gb", "USD", at, id); !bytes.Equal(got, k) {
			t.Errorf("DecodeHistKey(%q) = %v %q, re-encodes as %q", k, at, id, got)
		}
	})
}

func FuzzDecodeCalKey(f *testing.F) {
	f.Add(calKey("GPU-1", 1_700_000_000_000, "bafylease")[len(prefixCal):])
	f.Add(calKey("GPU-/x", 0x2f2f2f2f2f2f2f2f, "l")[len(prefixCal):])
	f.Add([]byte("x/"))
	f.Fuzz(func(t *testing.T, k []byte) {
		u, start, lease, ok := decodeCalKey(k)
		if !ok || strings.Contains(lease, "/") {
			return
		}
		if got := calKey(u, start, lease)[len(prefixCal):]; !bytes.Equal(got, k) {
			t.Errorf("decodeCalKey(%q) = %q %d %q, re-encodes as %q", k, u, start, lease, got)
		}
	})
}

// TestSmallStore: a Small store runs Badger with the small memtable and
// no caches, and still keeps what it is given across more than a few
// memtables' worth of writes, values far above its value threshold
// included, and a reopen.
func TestSmallStore(t *testing.T) {
	dir := t.TempDir()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(dir, Options{Logger: quiet, Small: true})
	if err != nil {
		t.Fatal(err)
	}
	o := s.db.Opts()
	if o.MemTableSize != SmallMemTableSize || o.BlockCacheSize != 0 || o.IndexCacheSize != 0 {
		t.Fatalf("small store: memtable %d, block cache %d, index cache %d; want %d, 0, 0",
			o.MemTableSize, o.BlockCacheSize, o.IndexCacheSize, SmallMemTableSize)
	}
	// 4 MiB of log chunks from 1 KiB to 1 MiB: four memtables and more.
	sizes := []int{1 << 10, 32 << 10, 100 << 10, 1 << 20}
	var want [][]byte
	for seq := range uint64(16) {
		chunk := bytes.Repeat([]byte{byte(seq + 1)}, sizes[seq%4])
		if err := s.PutLog("l", seq+1, chunk); err != nil {
			t.Fatalf("PutLog %d (%d bytes): %v", seq+1, len(chunk), err)
		}
		want = append(want, chunk)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if s, err = Open(dir, Options{Logger: quiet, Small: true}); err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var got [][]byte
	if err := s.Logs("l", 0, func(_ uint64, c []byte) bool { got = append(got, c); return true }); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("reopened small store holds %d chunks, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("chunk %d: %d bytes back, want %d bytes of %d", i+1, len(got[i]), len(want[i]), want[i][0])
		}
	}
}
