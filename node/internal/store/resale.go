package store

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/suanli/suanli/proto"
	gproto "google.golang.org/protobuf/proto"
)

func (s *Store) PutSignedPremium(key string, sp *proto.SignedPremium) error {
	b, err := receiptMarshal.Marshal(sp)
	if err != nil {
		return err
	}
	return s.syncUpdate(func(txn *badger.Txn) error { return txn.Set([]byte(key), b) })
}

// SignedPremiums calls fn with every resale this node holds a record of,
// as holder (resale/sold/) or new buyer (resale/bought/).
func (s *Store) SignedPremiums(fn func(sp *proto.SignedPremium) error) error {
	for _, prefix := range []string{"resale/sold/", "resale/bought/"} {
		if err := s.scan(prefix, func(_, v []byte) error {
			var sp proto.SignedPremium
			if err := gproto.Unmarshal(v, &sp); err != nil {
				return err
			}
			return fn(&sp)
		}); err != nil {
			return err
		}
	}
	return nil
}

// SignedPremium is the record at key, or nil when there is none.
func (s *Store) SignedPremium(key string) (*proto.SignedPremium, error) {
	var sp proto.SignedPremium
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get([]byte(key))
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return gproto.Unmarshal(v, &sp) })
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &sp, nil
}

// ErrHandedOver is returned by PutHandover for a lease handed over before.
var ErrHandedOver = errors.New("store: lease handed over already")

// PutHandover stores a provider's handover of lease with the new lease's
// terms, in one transaction that fails with ErrHandedOver when the lease
// was handed over before: a lease is resold once.
func (s *Store) PutHandover(lease string, nl *proto.Lease, rep *proto.ResaleReply) error {
	terms, err := gproto.Marshal(nl)
	if err != nil {
		return err
	}
	rec, err := receiptMarshal.Marshal(rep)
	if err != nil {
		return err
	}
	err = s.syncUpdate(func(txn *badger.Txn) error {
		if _, err := txn.Get(handoverKey(lease)); err == nil {
			return ErrHandedOver
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		if err := txn.Set(handoverKey(lease), rec); err != nil {
			return err
		}
		return txn.Set(leaseKey(nl.Id), terms)
	})
	if errors.Is(err, badger.ErrConflict) {
		return ErrHandedOver // another handover of the lease won the race
	}
	return err
}

// DropHandover undoes PutHandover after the handover failed.
func (s *Store) DropHandover(lease, newLease string) {
	s.syncUpdate(func(txn *badger.Txn) error {
		txn.Delete(handoverKey(lease))
		return txn.Delete(leaseKey(newLease))
	})
}

// HandoverOf is the stored handover of lease, or nil.
func (s *Store) HandoverOf(lease string) (*proto.ResaleReply, error) {
	var rep proto.ResaleReply
	err := s.db.View(func(txn *badger.Txn) error {
		item, err := txn.Get(handoverKey(lease))
		if err != nil {
			return err
		}
		return item.Value(func(v []byte) error { return gproto.Unmarshal(v, &rep) })
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &rep, nil
}

// PutResoldTake stores a holder's resale of a lease (its record at key)
// with its answer to the take that bought it (reply, a marshalled
// proto.TradeReply), in one synced transaction that fails with
// ErrAnswered when the take was answered before: a replayed take, after a
// restart too, gets this answer (TakeAnswer).
func (s *Store) PutResoldTake(key string, sp *proto.SignedPremium, take string, reply []byte) error {
	b, err := receiptMarshal.Marshal(sp)
	if err != nil {
		return err
	}
	return s.syncUpdate(func(txn *badger.Txn) error {
		switch _, err := txn.Get(answerKey(take)); {
		case err == nil:
			return fmt.Errorf("%w: %s", ErrAnswered, take)
		case !errors.Is(err, badger.ErrKeyNotFound):
			return err
		}
		if err := s.set(txn, []byte(key), b); err != nil {
			return err
		}
		return s.set(txn, answerKey(take), reply)
	})
}
