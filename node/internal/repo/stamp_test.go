package repo

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
)

// TestStampPersists: a repo without a stamp has none until Grind stores
// one; reopened, it has the same stamp without grinding (GrindStamp
// reports nothing ground, the file is unchanged). A stamp of another
// identity, of less work than asked, or garbled is none, and GrindStamp
// then grinds one that is stored. Control: a fresh grind gives another
// nonce, so "the same stamp" means "not ground again".
func TestStampPersists(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	id, other := peer.ID("maker-a"), peer.ID("maker-b")
	const bits = 10
	s := OpenStamp(dir, id, bits)
	if s.Get() != nil {
		t.Fatal("a repo without a stamp file has a stamp")
	}
	s.Grind(ctx, slog.New(slog.DiscardHandler))
	first := s.Get()
	if !p2p.VerifyStamp(id, first, bits) {
		t.Fatalf("ground stamp %x does not verify", first)
	}
	file := filepath.Join(dir, stampFile)
	saved, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(file); fi.Mode().Perm() != 0o600 {
		t.Errorf("stamp file mode %v, want 0600", fi.Mode().Perm())
	}
	// Restart: the same stamp, nothing ground.
	again := OpenStamp(dir, id, bits)
	if !bytes.Equal(again.Get(), first) {
		t.Fatalf("reopened stamp %x, want %x", again.Get(), first)
	}
	again.Grind(ctx, slog.New(slog.DiscardHandler))
	if ground, err := GrindStamp(ctx, dir, id, bits); err != nil || ground {
		t.Fatalf("GrindStamp on a stamped repo: ground=%v err=%v, want neither", ground, err)
	}
	if now, _ := os.ReadFile(file); !bytes.Equal(now, saved) {
		t.Fatalf("stamp file rewritten: %q -> %q", saved, now)
	}
	// Control: grinding again gives another nonce.
	if st, _ := p2p.GrindStamp(ctx, id, bits); bytes.Equal(st, first) {
		t.Fatalf("a fresh grind found the same nonce %x: the checks above prove nothing", st)
	}
	// None: another identity, more work than stored, a garbled file.
	if OpenStamp(dir, other, bits).Get() != nil {
		t.Error("another identity reads this one's stamp")
	}
	if w := p2p.StampWork(id, first); OpenStamp(dir, id, w+1).Get() != nil {
		t.Errorf("a stamp of %d bits read as one of %d", w, w+1)
	}
	if err := os.WriteFile(file, []byte(id.String()+" zz\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if OpenStamp(dir, id, bits).Get() != nil {
		t.Error("a garbled stamp file reads as a stamp")
	}
	if ground, err := GrindStamp(ctx, dir, id, bits); err != nil || !ground {
		t.Fatalf("GrindStamp on a garbled stamp: ground=%v err=%v, want ground", ground, err)
	}
	if OpenStamp(dir, id, bits).Get() == nil {
		t.Error("the stamp GrindStamp stored is not read back")
	}
}
