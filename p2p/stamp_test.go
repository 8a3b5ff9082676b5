package p2p_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
)

// refWork is StampWork computed bit by bit: the oracle of the tests.
func refWork(id peer.ID, stamp []byte) int {
	if len(stamp) != p2p.StampSize {
		return 0
	}
	sum := sha256.Sum256(append(append([]byte("suanli/maker-stamp/1\x00"), id...), stamp...))
	n := 0
	for _, b := range sum {
		for bit := 7; bit >= 0; bit-- {
			if b>>bit&1 != 0 {
				return n
			}
			n++
		}
	}
	return n
}

// TestGrindStamp: a ground stamp proves at least the work asked for its
// own ID, and is worth nothing to another ID; a cancelled grind stops and
// bits out of range are refused.
func TestGrindStamp(t *testing.T) {
	ctx := context.Background()
	id, other := peer.ID("maker-a"), peer.ID("maker-b")
	for _, bits := range []int{0, 1, 8, 12, 20} {
		st, err := p2p.GrindStamp(ctx, id, bits)
		if err != nil {
			t.Fatalf("GrindStamp(%d): %v", bits, err)
		}
		if len(st) != p2p.StampSize || !p2p.VerifyStamp(id, st, bits) {
			t.Fatalf("GrindStamp(%d) = %x: VerifyStamp false", bits, st)
		}
		if got, want := p2p.StampWork(id, st), refWork(id, st); got != want || got < bits {
			t.Fatalf("StampWork(%x) = %d, want %d (>= %d)", st, got, want, bits)
		}
	}
	st, err := p2p.GrindStamp(ctx, id, 20)
	if err != nil {
		t.Fatal(err)
	}
	// Another ID holds the same nonce to a fresh hash: 20 bits by chance
	// once in a million.
	if p2p.VerifyStamp(other, st, 20) {
		t.Fatalf("a stamp of %s verifies for %s", id, other)
	}
	if p2p.VerifyStamp(id, st[:p2p.StampSize-1], 0) || p2p.VerifyStamp(id, append(st, 0), 0) {
		t.Fatal("a stamp of the wrong size verifies")
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := p2p.GrindStamp(cctx, id, p2p.MaxStampBits); !errors.Is(err, context.Canceled) {
		t.Fatalf("GrindStamp with a cancelled context: %v, want context.Canceled", err)
	}
	for _, bits := range []int{-1, p2p.MaxStampBits + 1} {
		if _, err := p2p.GrindStamp(ctx, id, bits); !errors.Is(err, p2p.ErrStampBits) {
			t.Fatalf("GrindStamp(%d): %v, want ErrStampBits", bits, err)
		}
	}
}

// FuzzVerifyStamp: StampWork agrees with the bit-by-bit oracle for any ID
// and bytes, and VerifyStamp is exactly "the right size and that much
// work".
func FuzzVerifyStamp(f *testing.F) {
	f.Add([]byte("maker-a"), []byte{0, 0, 0, 0, 0, 0, 0, 0}, 8)
	f.Add([]byte{}, []byte{1, 2, 3}, 0)
	f.Add([]byte("x"), []byte{0xff, 0, 0, 0, 0, 0, 0, 1, 2}, -3)
	if st, err := p2p.GrindStamp(context.Background(), "maker-a", 12); err == nil {
		f.Add([]byte("maker-a"), st, 12)
	}
	f.Fuzz(func(t *testing.T, id, stamp []byte, bits int) {
		work := p2p.StampWork(peer.ID(id), stamp)
		if want := refWork(peer.ID(id), stamp); work != want {
			t.Fatalf("StampWork(%x, %x) = %d, want %d", id, stamp, work, want)
		}
		want := len(stamp) == p2p.StampSize && work >= bits
		if got := p2p.VerifyStamp(peer.ID(id), stamp, bits); got != want {
			t.Fatalf("VerifyStamp(%x, %x, %d) = %v, want %v", id, stamp, bits, got, want)
		}
	})
}

// BenchmarkGrindStamp grinds 16-bit stamps; ns/op / 2^16 is one hash, and
// 2^DefaultStampBits of them a real daemon's stamp.
func BenchmarkGrindStamp(b *testing.B) {
	id := peer.ID("benchmark-maker-id-of-38-bytes-or-so..")
	for b.Loop() {
		if _, err := p2p.GrindStamp(context.Background(), id, 16); err != nil {
			b.Fatal(err)
		}
	}
}
