package store

import (
	"bytes"
	"encoding/binary"
	"time"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// PutLeaseRecord stores a lease's own record (the node's JSON), synced.
func (s *Store) PutLeaseRecord(id string, rec []byte) error { return s.syncPut(leaseStateKey(id), rec) }

// LeaseRecords returns every stored lease record, by lease ID.
func (s *Store) LeaseRecords() (map[string][]byte, error) {
	out := map[string][]byte{}
	err := s.scan(prefixLeaseState, func(k, v []byte) error { out[string(k)] = v; return nil })
	return out, err
}

// receiptMarshal keeps a stored receipt's bytes stable.
var receiptMarshal = gproto.MarshalOptions{Deterministic: true}

// PutReceipt stores a lease's receipt seq, countersigned or not, synced:
// it is stored before it is sent or answered.
func (s *Store) PutReceipt(id string, seq uint64, sr *proto.SignedReceipt) error {
	b, err := receiptMarshal.Marshal(sr)
	if err != nil {
		return err
	}
	return s.syncPut(receiptKey(id, seq), b)
}

// DropReceipts deletes a lease's receipts from seq from to seq to, in one
// synced transaction. Only a provider's own receipts that its buyer never
// countersigned are dropped: those billing past a close both sides agreed
// on after the fact (node.takeClose).
func (s *Store) DropReceipts(id string, from, to uint64) error {
	return s.syncUpdate(func(txn *badger.Txn) error {
		for seq := from; seq <= to; seq++ {
			if err := s.del(txn, receiptKey(id, seq)); err != nil {
				return err
			}
		}
		return nil
	})
}

// GetReceipt reads a lease's receipt seq; ErrNotFound when none is stored.
func (s *Store) GetReceipt(id string, seq uint64) (*proto.SignedReceipt, error) {
	b, err := s.get(receiptKey(id, seq))
	if err != nil {
		return nil, err
	}
	var sr proto.SignedReceipt
	if err := gproto.Unmarshal(b, &sr); err != nil {
		return nil, err
	}
	return &sr, nil
}

// ReceiptsRaw is a lease's stored chain, in seq order, as stored.
func (s *Store) ReceiptsRaw(id string) ([][]byte, error) {
	var out [][]byte
	err := s.scan(receiptPrefix(id), func(_, v []byte) error { out = append(out, v); return nil })
	return out, err
}

// Receipts is a lease's stored chain, in seq order.
func (s *Store) Receipts(id string) ([]*proto.SignedReceipt, error) {
	raw, err := s.ReceiptsRaw(id)
	if err != nil {
		return nil, err
	}
	out := make([]*proto.SignedReceipt, 0, len(raw))
	for _, b := range raw {
		var sr proto.SignedReceipt
		if err := gproto.Unmarshal(b, &sr); err != nil {
			return nil, err
		}
		out = append(out, &sr)
	}
	return out, nil
}

// PutEvidence keeps two sealed receipts a provider signed with one seq of
// a lease, synced.
func (s *Store) PutEvidence(id string, seq uint64, a, b []byte) error {
	v, err := receiptMarshal.Marshal(&proto.ReceiptChain{Receipts: []*proto.SignedReceipt{{Receipt: a}, {Receipt: b}}})
	if err != nil {
		return err
	}
	return s.syncPut(evidenceKey(id, seq), v)
}

// EvidenceCount counts the equivocation evidence kept for a lease.
func (s *Store) EvidenceCount(id string) (int, error) {
	n := 0
	err := s.scan(evidencePrefix(id), func(_, _ []byte) error { n++; return nil })
	return n, err
}

// Evidence calls fn with every piece of equivocation evidence: its lease,
// seq and proto.ReceiptChain.
func (s *Store) Evidence(fn func(lease string, seq uint64, v []byte) error) error {
	return s.scan(prefixEvidence, func(k, v []byte) error {
		if len(k) < 9 || k[len(k)-9] != '/' {
			return nil
		}
		return fn(string(k[:len(k)-9]), binary.BigEndian.Uint64(k[len(k)-8:]), v)
	})
}

// GetEvidence reads one piece of equivocation evidence.
func (s *Store) GetEvidence(lease string, seq uint64) ([]byte, error) {
	return s.get(evidenceKey(lease, seq))
}

// PutFillEvidence keeps a refused doubly-signed fill (the node's JSON), synced.
func (s *Store) PutFillEvidence(id string, v []byte) error { return s.syncPut(fillEvidenceKey(id), v) }

// FillEvidence calls fn with every refused fill kept, by fill ID.
func (s *Store) FillEvidence(fn func(id string, v []byte) error) error {
	return s.scan(prefixFillEvidence, func(k, v []byte) error { return fn(string(k), v) })
}

// GetFillEvidence reads the evidence kept for one refused fill.
func (s *Store) GetFillEvidence(id string) ([]byte, error) { return s.get(fillEvidenceKey(id)) }

// PutPayment stores a sealed payment acknowledgement, synced.
func (s *Store) PutPayment(provider, buyer peer.ID, seq uint64, env []byte) error {
	return s.syncPut(paymentKey(provider, buyer, seq), env)
}

// Payments calls fn with every stored payment acknowledgement.
func (s *Store) Payments(fn func(env []byte) error) error {
	return s.scan(prefixPayment, func(_, v []byte) error { return fn(v) })
}

// PaymentsBetween calls fn with the acknowledgements provider gave buyer,
// in seq order.
func (s *Store) PaymentsBetween(provider, buyer peer.ID, fn func(seq uint64, env []byte) error) error {
	return s.scan(paymentPrefix(provider, buyer), func(k, v []byte) error {
		if len(k) != 8 {
			return nil
		}
		return fn(binary.BigEndian.Uint64(k), v)
	})
}

// PutLog stores one chunk of a lease's workload output.
func (s *Store) PutLog(id string, seq uint64, chunk []byte) error {
	return s.put(logKey(id, seq), chunk)
}

// LastLogSeq is the seq of a lease's last stored output chunk (0: none).
func (s *Store) LastLogSeq(id string) (uint64, error) {
	var last uint64
	err := s.scan(logPrefix(id), func(k, _ []byte) error {
		if len(k) == 8 {
			last = binary.BigEndian.Uint64(k)
		}
		return nil
	})
	return last, err
}

// LogBytes is the size of a lease's stored output chunks, in bytes.
func (s *Store) LogBytes(id string) (int64, error) {
	var n int64
	prefix := []byte(logPrefix(id))
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if len(it.Item().Key()) == len(prefix)+8 {
				n += it.Item().ValueSize()
			}
		}
		return nil
	})
	return n, err
}

// TrimLogs deletes a lease's oldest output chunks until at least atLeast
// bytes are freed (or none is left), and returns the bytes freed. Seqs are
// never reused, so a reader sees the gap (LogsView.Dropped).
func (s *Store) TrimLogs(id string, atLeast int64) (int64, error) {
	var freed int64
	var keys [][]byte
	prefix := []byte(logPrefix(id))
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
		defer it.Close()
		for it.Rewind(); it.Valid() && freed < atLeast; it.Next() {
			if len(it.Item().Key()) == len(prefix)+8 {
				freed += it.Item().ValueSize()
				keys = append(keys, it.Item().KeyCopy(nil))
			}
		}
		return nil
	})
	if err != nil || len(keys) == 0 {
		return 0, err
	}
	err = s.db.Update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := s.del(txn, k); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return freed, nil
}

// Logs calls fn with a lease's output chunks after seq after, in order,
// until fn returns false.
func (s *Store) Logs(id string, after uint64, fn func(seq uint64, chunk []byte) bool) error {
	prefix := logPrefix(id)
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(prefix)})
		defer it.Close()
		for it.Seek(logKey(id, after+1)); it.Valid(); it.Next() {
			k := it.Item().Key()
			if len(k) != len(prefix)+8 {
				continue
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			if !fn(binary.BigEndian.Uint64(k[len(prefix):]), v) {
				return nil
			}
		}
		return nil
	})
}

// PutVerdict stores the last attestation verdict on p (the node's JSON).
func (s *Store) PutVerdict(p peer.ID, v []byte) error { return s.put(attestKey(p), v) }

// Verdict reads the last attestation verdict on p; ErrNotFound when none.
func (s *Store) Verdict(p peer.ID) ([]byte, error) { return s.get(attestKey(p)) }

// PutHistory stores one price history point.
func (s *Store) PutHistory(mkt, cur string, at time.Time, fill string, point []byte) error {
	return s.put(HistKey(mkt, cur, at, fill), point)
}

// History calls fn with a market's price history points in a currency,
// newest first, until fn returns false. A key that does not decode comes
// with an error wrapping ErrCorrupt.
func (s *Store) History(mkt, cur string, fn func(at time.Time, fill string, point []byte, err error) bool) error {
	prefix := HistPrefix(mkt, cur)
	return s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, Reverse: true, PrefetchValues: true, PrefetchSize: 100})
		defer it.Close()
		for it.Seek(append(bytes.Clone(prefix), 0xff)); it.Valid(); it.Next() {
			item := it.Item()
			at, id, err := DecodeHistKey(prefix, item.Key())
			var v []byte
			if err == nil {
				v, err = item.ValueCopy(nil)
			}
			if !fn(at, id, v, err) {
				return nil
			}
		}
		return nil
	})
}
