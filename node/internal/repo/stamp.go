package repo

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node/internal/repofile"
	"github.com/suanli/suanli/p2p"
)

// stampFile holds the identity's maker stamp (p2p/stamp.go) beside its
// key: "<peer ID> <hex nonce>\n", 0600. It is ground once per identity,
// by `suanli init` or by the first daemon that finds none (or one of less
// work than it is configured for), and kept: a restart does not grind.
const stampFile = "keystore/identity.stamp"

// LoadStamp returns the repo's stored stamp for id when it proves at least
// bits of work, else nil (none, another identity's, or too little work).
func LoadStamp(dir string, id peer.ID, bits int) []byte {
	b, err := os.ReadFile(filepath.Join(dir, stampFile))
	if err != nil {
		return nil
	}
	owner, nonce, ok := strings.Cut(strings.TrimSpace(string(b)), " ")
	if !ok || owner != id.String() {
		return nil
	}
	st, err := hex.DecodeString(nonce)
	if err != nil || !p2p.VerifyStamp(id, st, bits) {
		return nil
	}
	return st
}

// SaveStamp stores id's stamp in the repo (atomically, 0600).
func SaveStamp(dir string, id peer.ID, stamp []byte) error {
	if err := os.MkdirAll(filepath.Join(dir, "keystore"), 0o700); err != nil {
		return err
	}
	line := id.String() + " " + hex.EncodeToString(stamp) + "\n"
	return repofile.WriteAtomic(filepath.Join(dir, stampFile), []byte(line), 0o600)
}

// GrindStamp makes sure the repo holds a stamp of at least bits for id,
// grinding and storing one if not; it reports whether it ground.
func GrindStamp(ctx context.Context, dir string, id peer.ID, bits int) (ground bool, err error) {
	if LoadStamp(dir, id, bits) != nil {
		return false, nil
	}
	st, err := p2p.GrindStamp(ctx, id, bits)
	if err != nil {
		return false, err
	}
	if err := SaveStamp(dir, id, st); err != nil {
		return false, fmt.Errorf("node: store stamp: %w", err)
	}
	return true, nil
}

// Stamp is a running node's maker stamp: the repo's when it has one of
// enough work, else none until Grind has made and stored one. Its methods
// are safe for concurrent use.
type Stamp struct {
	dir  string
	id   peer.ID
	bits int
	v    atomic.Pointer[[]byte]
}

// OpenStamp loads id's stamp of at least bits from the repo at dir.
func OpenStamp(dir string, id peer.ID, bits int) *Stamp {
	s := &Stamp{dir: dir, id: id, bits: bits}
	if st := LoadStamp(dir, id, bits); st != nil {
		s.v.Store(&st)
	}
	return s
}

// Get is the stamp, or nil while there is none.
func (s *Stamp) Get() []byte {
	if p := s.v.Load(); p != nil {
		return *p
	}
	return nil
}

// Grind grinds and stores the stamp if there is none yet, logging to log;
// until it returns, Get is nil (the node publishes unstamped). It stops
// when ctx ends. Run it on a goroutine the node's Close waits for.
func (s *Stamp) Grind(ctx context.Context, log *slog.Logger) {
	if s.Get() != nil {
		return
	}
	log.Info("grinding the maker stamp; orders go unstamped until it is done", "bits", s.bits)
	start := time.Now()
	st, err := p2p.GrindStamp(ctx, s.id, s.bits)
	if err != nil {
		if !errors.Is(err, context.Canceled) {
			log.Warn("maker stamp", "err", err)
		}
		return
	}
	s.v.Store(&st)
	if err := SaveStamp(s.dir, s.id, st); err != nil {
		log.Warn("maker stamp not stored", "err", err)
	}
	log.Info("maker stamp ready", "bits", s.bits, "took", time.Since(start).Round(time.Millisecond))
}
