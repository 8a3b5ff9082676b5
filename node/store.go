package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// store is the node's Badger datastore. Keys:
//
//	seq/offer          last offer seq this node published (uint64 BE)
//	offer/<peer>       last valid sealed offer seen from a provider
type store struct {
	db *badger.DB
}

var keyOfferSeq = []byte("seq/offer")

func openStore(dir string, log *slog.Logger) (*store, error) {
	opts := badger.DefaultOptions(dir).
		WithLogger(badgerLogger{log}).
		// A market node's working set is small; keep each store modest so a
		// devnet of dozens of nodes fits in one process.
		WithMemTableSize(8 << 20).
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithValueLogFileSize(64 << 20).
		WithNumMemtables(2).
		WithNumLevelZeroTables(2).
		WithNumLevelZeroTablesStall(8)
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("node: open datastore %s: %w", dir, err)
	}
	return &store{db: db}, nil
}

func (s *store) Close() error { return s.db.Close() }

// nextOfferSeq atomically increments and returns the offer seq, so a
// restarted provider always publishes a higher seq than before.
func (s *store) nextOfferSeq(atLeast uint64) (uint64, error) {
	var next uint64
	err := s.db.Update(func(txn *badger.Txn) error {
		var cur uint64
		item, err := txn.Get(keyOfferSeq)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if err := item.Value(func(v []byte) error {
				if len(v) != 8 {
					return fmt.Errorf("node: corrupt offer seq (%d bytes)", len(v))
				}
				cur = binary.BigEndian.Uint64(v)
				return nil
			}); err != nil {
				return err
			}
		}
		next = max(cur+1, atLeast)
		return txn.Set(keyOfferSeq, binary.BigEndian.AppendUint64(nil, next))
	})
	if err != nil {
		return 0, err
	}
	// Durable before the offer that carries it is published.
	return next, s.db.Sync()
}

func offerKey(p peer.ID) []byte { return append([]byte("offer/"), p...) }

// putOffer caches a validated sealed offer.
func (s *store) putOffer(p peer.ID, env []byte) error {
	return s.db.Update(func(txn *badger.Txn) error { return txn.Set(offerKey(p), env) })
}

// cachedOffers returns every cached sealed offer; callers re-validate.
func (s *store) cachedOffers() (map[peer.ID][]byte, error) {
	out := map[peer.ID][]byte{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("offer/")})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			out[peer.ID(item.Key()[len("offer/"):])] = v
		}
		return nil
	})
	return out, err
}

// badgerLogger sends Badger's logs to slog, keeping its chatty Info at Debug.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) Errorf(f string, a ...any)   { b.l.Error(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Warningf(f string, a ...any) { b.l.Warn(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Infof(f string, a ...any)    { b.l.Debug(fmt.Sprintf(f, a...)) }
func (b badgerLogger) Debugf(f string, a ...any)   { b.l.Debug(fmt.Sprintf(f, a...)) }

// Trade keys:
//
//	fill/<unix-ms BE>/<fill id>   a doubly-signed fill (proto.Fill)
//	lease/<lease id>              a lease this node is party to (proto.Lease)
//	gpu/<uuid>                    reservation: lease id and end (unix ms)

func (s *store) putFill(id string, at time.Time, f *proto.Fill) error {
	b, err := gproto.Marshal(f)
	if err != nil {
		return err
	}
	key := binary.BigEndian.AppendUint64([]byte("fill/"), uint64(at.UnixMilli()))
	key = append(append(key, '/'), id...)
	return s.db.Update(func(txn *badger.Txn) error { return txn.Set(key, b) })
}

// putLease persists a lease with a synced write: a lease is money.
func (s *store) putLease(l *proto.Lease) error {
	b, err := gproto.Marshal(l)
	if err != nil {
		return err
	}
	if err := s.db.Update(func(txn *badger.Txn) error { return txn.Set([]byte("lease/"+l.Id), b) }); err != nil {
		return err
	}
	return s.db.Sync()
}

// reserveGPUs marks GPUs as held by a lease until end, in one transaction:
// if any is already held by another live lease, none is reserved.
func (s *store) reserveGPUs(uuids []string, lease string, end time.Time, over ...string) error {
	now := time.Now().UnixMilli()
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, u := range uuids {
			item, err := txn.Get([]byte("gpu/" + u))
			if err == nil {
				var held string
				var until int64
				if err := item.Value(func(v []byte) error {
					held, until = decodeReservation(v)
					return nil
				}); err != nil {
					return err
				}
				if until > now && held != lease && !slices.Contains(over, held) {
					return fmt.Errorf("node: GPU %s is leased (%s)", u, held)
				}
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			v := binary.BigEndian.AppendUint64(nil, uint64(end.UnixMilli()))
			if err := txn.Set([]byte("gpu/"+u), append(v, lease...)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	return s.db.Sync()
}

func (s *store) releaseGPUs(uuids []string, lease string) {
	s.db.Update(func(txn *badger.Txn) error {
		for _, u := range uuids {
			item, err := txn.Get([]byte("gpu/" + u))
			if err != nil {
				continue
			}
			var held string
			item.Value(func(v []byte) error { held, _ = decodeReservation(v); return nil })
			if held == lease {
				txn.Delete([]byte("gpu/" + u))
			}
		}
		return nil
	})
	s.releaseBlocks(uuids, lease)
}

// reservedGPUs lists GPUs held by a lease that has not ended by now.
func (s *store) reservedGPUs(now time.Time) (map[string]bool, error) {
	out := map[string]bool{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("gpu/"), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			if err := item.Value(func(v []byte) error {
				if _, until := decodeReservation(v); until > now.UnixMilli() {
					out[string(item.Key()[len("gpu/"):])] = true
				}
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	active, err := s.activeBlocks(now)
	for u := range active {
		out[u] = true
	}
	return out, err
}

func decodeReservation(v []byte) (lease string, until int64) {
	if len(v) < 8 {
		return "", 0
	}
	return string(v[8:]), int64(binary.BigEndian.Uint64(v[:8]))
}
