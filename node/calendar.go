package node

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// The GPU calendar: reserved time sold ahead. A forward block is kept per
// GPU beside the current holds (gpu/<uuid>):
//
//	cal/<uuid>/<start BE>/<lease>   end (Unix ms, BE)
//
// Blocks of one GPU never overlap one another nor a current hold; a block
// counts as a hold from its start (reservedGPUs, gpuHolds), and the lease
// it belongs to starts then.

// parseStart reads a forward start: RFC 3339, or "+D" after now.
func parseStart(s string, now time.Time) (time.Time, error) {
	if d, ok := strings.CutPrefix(s, "+"); ok {
		dd, err := time.ParseDuration(d)
		if err != nil || dd < 0 {
			return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
		}
		return now.Add(dd), nil
	}
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q: want RFC 3339 or +DURATION", s)
	}
	return t, nil
}

// reservedAskPrice derives a reserved ask's price from the offer: the
// on-demand price with the discount its minimum duration earns.
func (n *Node) reservedAskPrice(req api.OrderRequest) (string, error) {
	offer := n.Published()
	if offer == nil {
		return "", fmt.Errorf("%w: an ask needs a published offer", api.ErrNoGPUs)
	}
	minD, err := time.ParseDuration(cmpOr(req.MinDuration, defaultMinLease.String()))
	if err != nil {
		return "", api.BadRequest("min-duration: %v", err)
	}
	var ds []market.Discount
	for _, d := range offer.GetPricing().GetReserved() {
		ds = append(ds, market.Discount{MinDuration: time.Duration(d.MinDurationS) * time.Second, BasisPoints: d.BasisPoints})
	}
	p, err := market.ReservedPrice(offer.GetPricing().GetOnDemandMicros(), minD, ds)
	if err != nil {
		return "", api.BadRequest("reserved price: %v", err)
	}
	return market.FormatMicros(p, offer.GetPricing().GetCurrency()), nil
}

func calKey(uuid string, start int64, lease string) []byte {
	k := binary.BigEndian.AppendUint64([]byte("cal/"+uuid+"/"), uint64(start))
	return append(append(k, '/'), lease...)
}

// block is one forward block of a GPU.
type block struct {
	lease      string
	start, end int64
}

// blocksOf lists a GPU's forward blocks in a transaction.
func blocksOf(txn *badger.Txn, uuid string) ([]block, error) {
	prefix := []byte("cal/" + uuid + "/")
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true})
	defer it.Close()
	var out []block
	for it.Rewind(); it.Valid(); it.Next() {
		k := it.Item().Key()[len(prefix):]
		if len(k) < 9 {
			continue
		}
		v, err := it.Item().ValueCopy(nil)
		if err != nil || len(v) < 8 {
			return nil, err
		}
		out = append(out, block{lease: string(k[9:]), start: int64(binary.BigEndian.Uint64(k[:8])), end: int64(binary.BigEndian.Uint64(v))})
	}
	return out, nil
}

// reserveBlock holds GPUs for a lease over [from, end): a forward block
// when it starts later, else a current hold. None is reserved if any GPU
// is held over that time by another lease (over: leases it may take from).
func (s *store) reserveBlock(uuids []string, lease string, from, end time.Time, over ...string) error {
	if !from.After(time.Now()) {
		return s.reserveGPUs(uuids, lease, end, over...)
	}
	f, e := from.UnixMilli(), end.UnixMilli()
	err := s.db.Update(func(txn *badger.Txn) error {
		for _, u := range uuids {
			if item, err := txn.Get([]byte("gpu/" + u)); err == nil {
				var held string
				var until int64
				item.Value(func(v []byte) error { held, until = decodeReservation(v); return nil })
				if until > f && held != lease && !slices.Contains(over, held) {
					return fmt.Errorf("node: GPU %s is leased until %s (%s)", u, time.UnixMilli(until).UTC().Format(time.RFC3339), held)
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
					return fmt.Errorf("node: GPU %s has a block %s–%s (%s)", u, time.UnixMilli(b.start).UTC().Format(time.RFC3339),
						time.UnixMilli(b.end).UTC().Format(time.RFC3339), b.lease)
				}
			}
			if err := txn.Set(calKey(u, f, lease), binary.BigEndian.AppendUint64(nil, uint64(e))); err != nil {
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

// releaseBlocks drops a lease's forward blocks.
func (s *store) releaseBlocks(uuids []string, lease string) {
	s.db.Update(func(txn *badger.Txn) error {
		for _, u := range uuids {
			bs, _ := blocksOf(txn, u)
			for _, b := range bs {
				if b.lease == lease {
					txn.Delete(calKey(u, b.start, b.lease))
				}
			}
		}
		return nil
	})
}

// busyBetween lists the GPUs held at any time in [from, end): by a current
// hold or a forward block.
func (s *store) busyBetween(from, end time.Time) (map[string]bool, error) {
	f, e := from.UnixMilli(), end.UnixMilli()
	out := map[string]bool{}
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte("gpu/"), PrefetchValues: true})
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				it.Close()
				return err
			}
			if _, until := decodeReservation(v); until > f && time.Now().UnixMilli() < e {
				out[string(it.Item().Key()[len("gpu/"):])] = true
			}
		}
		it.Close()
		it = txn.NewIterator(badger.IteratorOptions{Prefix: []byte("cal/"), PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			k := it.Item().Key()[len("cal/"):]
			i := len(k) - 1
			for i >= 0 && k[i] != '/' {
				i--
			}
			// k = uuid / start(8) / lease: the start sits just before the last '/'.
			if i < 9 {
				continue
			}
			start := int64(binary.BigEndian.Uint64(k[i-8 : i]))
			v, err := it.Item().ValueCopy(nil)
			if err != nil || len(v) < 8 {
				continue
			}
			if start < e && f < int64(binary.BigEndian.Uint64(v)) {
				out[string(k[:i-9])] = true
			}
		}
		return nil
	})
	return out, err
}

// freeGPUsFor lists this provider's GPUs in mkt free over [from, end).
func (n *Node) freeGPUsFor(mkt string, from, end time.Time) ([]string, error) {
	offer := n.Published()
	if offer == nil {
		return nil, fmt.Errorf("%w: no published offer", api.ErrNoGPUs)
	}
	busy, err := n.store.busyBetween(from, end)
	if err != nil {
		return nil, err
	}
	var free []string
	for _, g := range offer.Gpus {
		if g.Market == mkt && !busy[g.Uuid] {
			free = append(free, g.Uuid)
		}
	}
	return free, nil
}

// leaseStartFor is when a trade of the bid starts: its block's start when
// that is ahead, else now.
func leaseStartFor(bid *market.Order, now time.Time) time.Time {
	if !bid.Start.IsZero() && bid.Start.After(now) {
		return bid.Start
	}
	return now
}

// wantStart is when the lease of a take by o must start, when that is
// fixed: a bid's forward block, or the resting bid's block a provider
// takes; zero when the lease starts now.
func wantStart(o *market.Order, blockStart, now time.Time) time.Time {
	if o.Side == market.Bid && !o.Start.IsZero() && o.Start.After(now) {
		return time.UnixMilli(o.Start.UnixMilli())
	}
	if blockStart.After(now) {
		return time.UnixMilli(blockStart.UnixMilli())
	}
	return time.Time{}
}

// activeBlocks are the forward blocks under way at now, by GPU.
func (s *store) activeBlocks(now time.Time) (map[string]gpuHold, error) {
	ms := now.UnixMilli()
	out := map[string]gpuHold{}
	err := s.scan("cal/", func(k, v []byte) error {
		i := len(k) - 1
		for i >= 0 && k[i] != '/' {
			i--
		}
		if i < 9 || len(v) < 8 {
			return nil
		}
		start, end := int64(binary.BigEndian.Uint64(k[i-8:i])), int64(binary.BigEndian.Uint64(v))
		if start <= ms && ms < end {
			out[string(k[:i-9])] = gpuHold{lease: string(k[i+1:]), until: time.UnixMilli(end)}
		}
		return nil
	})
	return out, err
}
