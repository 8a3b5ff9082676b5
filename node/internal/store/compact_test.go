package store

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// TestSmallStoreCompacts: a Small store runs no Badger compactor, so its
// own loop must keep level 0 under the stall: 48 MiB of small values
// (48 memtables, past smallL0Stall's 32) are all written, level 0 comes
// back to at most NumLevelZeroTables, and every value reads back. Without
// compactLoop the writes block at the stall (checked).
func TestSmallStoreCompacts(t *testing.T) {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := Open(t.TempDir(), Options{Logger: quiet, Small: true, compactEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if n := s.db.Opts().NumCompactors; n != 0 {
		t.Fatalf("small store runs %d Badger compactors, want 0", n)
	}
	const (
		valSize = 4 << 10
		perTxn  = 24
		total   = 48 << 20
	)
	keys := total / valSize
	val := func(i int) []byte { return bytes.Repeat([]byte{byte(i)}, valSize) }
	written := make(chan error, 1)
	go func() {
		for i := 0; i < keys; i += perTxn {
			err := s.db.Update(func(txn *badger.Txn) error {
				for j := i; j < min(i+perTxn, keys); j++ {
					if err := txn.Set(fmt.Appendf(nil, "k%06d", j), val(j)); err != nil {
						return err
					}
				}
				return nil
			})
			if err != nil {
				written <- err
				return
			}
		}
		written <- nil
	}()
	select {
	case err := <-written:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(3 * time.Minute):
		t.Fatalf("writes still blocked after 3 min (level 0 stalls at %d tables)", smallL0Stall)
	}
	l0 := s.db.Opts().NumLevelZeroTables
	deadline := time.Now().Add(time.Minute)
	for s.db.Levels()[0].NumTables > l0 {
		if time.Now().After(deadline) {
			t.Fatalf("level 0 still holds %d tables a minute after the writes, want at most %d", s.db.Levels()[0].NumTables, l0)
		}
		time.Sleep(10 * time.Millisecond)
	}
	err = s.db.View(func(txn *badger.Txn) error {
		for _, j := range []int{0, keys / 2, keys - 1} {
			it, err := txn.Get(fmt.Appendf(nil, "k%06d", j))
			if err != nil {
				return fmt.Errorf("key %d: %w", j, err)
			}
			v, err := it.ValueCopy(nil)
			if err != nil || !bytes.Equal(v, val(j)) {
				return fmt.Errorf("key %d: %d bytes back (%v), want %d of %d", j, len(v), err, valSize, byte(j))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
