package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// NextOfferSeq atomically increments and returns the offer seq (at least
// atLeast), synced, so a restarted provider always publishes a higher seq
// than before.
func (s *Store) NextOfferSeq(atLeast uint64) (uint64, error) {
	var next uint64
	err := s.update(func(txn *badger.Txn) error {
		var cur uint64
		item, err := txn.Get(keyOfferSeq)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if err := item.Value(func(v []byte) error {
				if len(v) != 8 {
					return fmt.Errorf("%w: offer seq (%d bytes)", ErrCorrupt, len(v))
				}
				cur = binary.BigEndian.Uint64(v)
				return nil
			}); err != nil {
				return err
			}
		}
		next = max(cur+1, atLeast)
		return s.set(txn, keyOfferSeq, binary.BigEndian.AppendUint64(nil, next))
	})
	if err != nil {
		return 0, err
	}
	// Durable before the offer that carries it is published.
	return next, s.db.Sync()
}

// PutOffer caches a validated sealed offer of p.
func (s *Store) PutOffer(p peer.ID, env []byte) error { return s.put(offerKey(p), env) }

// CachedOffers returns every cached sealed offer; callers re-validate.
func (s *Store) CachedOffers() (map[peer.ID][]byte, error) {
	out := map[peer.ID][]byte{}
	err := s.scan(prefixOffer, func(k, v []byte) error { out[peer.ID(k)] = v; return nil })
	return out, err
}

// PutFill stores a doubly-signed fill applied at at.
func (s *Store) PutFill(id string, at time.Time, f *proto.Fill) error {
	b, err := gproto.Marshal(f)
	if err != nil {
		return err
	}
	return s.put(fillKey(at, id), b)
}

// PutLease stores a lease's terms, synced: a lease is money.
func (s *Store) PutLease(l *proto.Lease) error {
	b, err := gproto.Marshal(l)
	if err != nil {
		return err
	}
	return s.syncPut(leaseKey(l.Id), b)
}

// GetLease reads a lease's terms; ErrNotFound when none is stored.
func (s *Store) GetLease(id string) (*proto.Lease, error) {
	b, err := s.get(leaseKey(id))
	if err != nil {
		return nil, err
	}
	var l proto.Lease
	if err := gproto.Unmarshal(b, &l); err != nil {
		return nil, err
	}
	return &l, nil
}

// Hold is one GPU reservation: the lease (or take) holding it, until.
type Hold struct {
	Lease string
	Until time.Time
}

// ReserveGPUs marks GPUs as held by a lease until end, in one synced
// transaction: if any is already held by another live lease (over: leases
// it may take from), none is reserved.
func (s *Store) ReserveGPUs(uuids []string, lease string, end time.Time, over ...string) error {
	return s.syncUpdate(func(txn *badger.Txn) error { return s.reserveGPUs(txn, uuids, lease, end, over) })
}

// reserveGPUs is ReserveGPUs in txn.
func (s *Store) reserveGPUs(txn *badger.Txn, uuids []string, lease string, end time.Time, over []string) error {
	now := s.now().UnixMilli()
	for _, u := range uuids {
		item, err := txn.Get(gpuKey(u))
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
				return fmt.Errorf("store: GPU %s is leased (%s)", u, held)
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		if err := s.set(txn, gpuKey(u), reservation(end, lease)); err != nil {
			return err
		}
	}
	return nil
}

// ReleaseGPUs drops a lease's holds and forward blocks of the GPUs, in
// one transaction; holds of other leases stay. Not synced: a release
// lost in a crash leaves a hold that lapses at its end.
func (s *Store) ReleaseGPUs(uuids []string, lease string) error {
	return s.update(func(txn *badger.Txn) error {
		for _, u := range uuids {
			item, err := txn.Get(gpuKey(u))
			switch {
			case errors.Is(err, badger.ErrKeyNotFound):
			case err != nil:
				return err
			default:
				var held string
				if err := item.Value(func(v []byte) error { held, _ = decodeReservation(v); return nil }); err != nil {
					return err
				}
				if held == lease {
					if err := s.del(txn, gpuKey(u)); err != nil {
						return err
					}
				}
			}
			bs, err := blocksOf(txn, u)
			if err != nil {
				return err
			}
			for _, b := range bs {
				if b.lease == lease {
					if err := s.del(txn, calKey(u, b.start, b.lease)); err != nil {
						return err
					}
				}
			}
		}
		return nil
	})
}

// ReservedGPUs lists GPUs held by a lease that has not ended by now, or
// by a forward block under way at now.
func (s *Store) ReservedGPUs(now time.Time) (map[string]bool, error) {
	holds, err := s.GPUHolds(now)
	if err != nil {
		return nil, err
	}
	out := make(map[string]bool, len(holds))
	for u := range holds {
		out[u] = true
	}
	return out, nil
}

// GPUHolds lists the GPUs held at now, by UUID: current holds, then the
// forward blocks that have begun.
func (s *Store) GPUHolds(now time.Time) (map[string]Hold, error) {
	out := map[string]Hold{}
	err := s.scan(prefixGPU, func(k, v []byte) error {
		lease, until := decodeReservation(v)
		if until > now.UnixMilli() {
			out[string(k)] = Hold{Lease: lease, Until: time.UnixMilli(until)}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	active, err := s.activeBlocks(now)
	if err != nil {
		return nil, err
	}
	for u, h := range active {
		if _, ok := out[u]; !ok {
			out[u] = h
		}
	}
	return out, nil
}

// block is one forward block of a GPU.
type block struct {
	lease      string
	start, end int64
}

// blocksOf lists a GPU's forward blocks in a transaction.
func blocksOf(txn *badger.Txn, uuid string) ([]block, error) {
	prefix := calPrefix(uuid)
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var out []block
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) < 9 {
			continue
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil {
			return nil, err
		}
		if len(v) < 8 {
			continue
		}
		out = append(out, block{lease: string(k[9:]), start: int64(binary.BigEndian.Uint64(k[:8])), end: int64(binary.BigEndian.Uint64(v))})
	}
	return out, nil
}

// ReserveBlock holds GPUs for a lease over [from, end): a forward block
// when it starts later, else a current hold (ReserveGPUs). None is
// reserved if any GPU is held over that time by another lease (over:
// leases it may take from).
func (s *Store) ReserveBlock(uuids []string, lease string, from, end time.Time, over ...string) error {
	h := BlockHold{GPUs: uuids, Lease: lease, From: from, End: end, Over: over}
	return s.syncUpdate(func(txn *badger.Txn) error { return s.hold(txn, h) })
}

// BlockHold is what ReserveBlock holds: GPUs for a lease over [From, End),
// unless another lease (but those in Over) holds any of them then.
type BlockHold struct {
	GPUs      []string
	Lease     string
	From, End time.Time
	Over      []string
}

// HoldUnsynced is ReserveBlock without the sync: the hold is in force at
// once (no other hold can take the GPUs), but a crash may lose it. It is
// for a maker's hold of a take's GPUs, which PutAcceptedTake then writes
// again, synced, with the lease it accepts: one sync on the way to the
// accept instead of two, and a hold lost in a crash is the hold of a take
// never answered.
func (s *Store) HoldUnsynced(h BlockHold) error {
	return s.update(func(txn *badger.Txn) error { return s.hold(txn, h) })
}

// hold is ReserveBlock in txn.
func (s *Store) hold(txn *badger.Txn, h BlockHold) error {
	if !h.From.After(s.now()) {
		return s.reserveGPUs(txn, h.GPUs, h.Lease, h.End, h.Over)
	}
	uuids, lease, over := h.GPUs, h.Lease, h.Over
	f, e := h.From.UnixMilli(), h.End.UnixMilli()
	for _, u := range uuids {
		if item, err := txn.Get(gpuKey(u)); err == nil {
			var held string
			var until int64
			if err := item.Value(func(v []byte) error { held, until = decodeReservation(v); return nil }); err != nil {
				return err
			}
			if until > f && held != lease && !slices.Contains(over, held) {
				return fmt.Errorf("store: GPU %s is leased until %s (%s)", u, time.UnixMilli(until).UTC().Format(time.RFC3339), held)
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		bs, err := blocksOf(txn, u)
		if err != nil {
			return err
		}
		for _, b := range bs {
			if b.lease != lease && b.start < e && f < b.end {
				return fmt.Errorf("store: GPU %s has a block %s–%s (%s)", u, time.UnixMilli(b.start).UTC().Format(time.RFC3339),
					time.UnixMilli(b.end).UTC().Format(time.RFC3339), b.lease)
			}
		}
		if err := s.set(txn, calKey(u, f, lease), binary.BigEndian.AppendUint64(nil, uint64(e))); err != nil {
			return err
		}
	}
	return nil
}

// BusyBetween lists the GPUs held at any time in [from, end): by a
// current hold or a forward block.
func (s *Store) BusyBetween(from, end time.Time) (map[string]bool, error) {
	f, e := from.UnixMilli(), end.UnixMilli()
	now := s.now().UnixMilli()
	out := map[string]bool{}
	err := s.scan(prefixGPU, func(k, v []byte) error {
		if _, until := decodeReservation(v); until > f && now < e {
			out[string(k)] = true
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	err = s.scan(prefixCal, func(k, v []byte) error {
		u, start, _, ok := decodeCalKey(k)
		if ok && len(v) >= 8 && start < e && f < int64(binary.BigEndian.Uint64(v)) {
			out[u] = true
		}
		return nil
	})
	return out, err
}

// activeBlocks are the forward blocks under way at now, by GPU.
func (s *Store) activeBlocks(now time.Time) (map[string]Hold, error) {
	ms := now.UnixMilli()
	out := map[string]Hold{}
	err := s.scan(prefixCal, func(k, v []byte) error {
		u, start, lease, ok := decodeCalKey(k)
		if !ok || len(v) < 8 {
			return nil
		}
		if end := int64(binary.BigEndian.Uint64(v)); start <= ms && ms < end {
			out[u] = Hold{Lease: lease, Until: time.UnixMilli(end)}
		}
		return nil
	})
	return out, err
}
