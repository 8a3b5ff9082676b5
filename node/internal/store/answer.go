package store

import (
	"errors"
	"fmt"

	badger "github.com/dgraph-io/badger/v4"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/proto"
)

// ErrAnswered is returned by PutAcceptedTake when the take was answered
// before, or its lease ID is taken: a take is answered once.
var ErrAnswered = errors.New("store: take already answered")

// answerKey is where the answer a maker sent to one take is kept.
func answerKey(take string) []byte { return []byte(prefixAnswer + take) }

// PutAcceptedTake stores a maker's accept of a take together with the
// lease's terms, in one synced transaction, and only if neither the
// answer nor a lease under the take's ID is stored yet (ErrAnswered): a
// replayed take can never rewrite terms a first answer stored. reply is
// the marshalled proto.TradeReply sent to the taker. hold, if not nil, is
// the hold of the lease's GPUs (HoldUnsynced), written again in the same
// transaction, so that one sync makes both durable before the accept is
// sent; if another lease holds the GPUs meanwhile, nothing is stored.
func (s *Store) PutAcceptedTake(l *proto.Lease, reply []byte, hold *BlockHold) error {
	b, err := gproto.Marshal(l)
	if err != nil {
		return err
	}
	return s.syncUpdate(func(txn *badger.Txn) error {
		if hold != nil {
			if err := s.hold(txn, *hold); err != nil {
				return err
			}
		}
		for _, k := range [][]byte{answerKey(l.Id), leaseKey(l.Id)} {
			switch _, err := txn.Get(k); {
			case err == nil:
				return fmt.Errorf("%w: %s", ErrAnswered, l.Id)
			case !errors.Is(err, badger.ErrKeyNotFound):
				return err
			}
		}
		if err := s.set(txn, leaseKey(l.Id), b); err != nil {
			return err
		}
		return s.set(txn, answerKey(l.Id), reply)
	})
}

// TakeAnswer is the marshalled reply stored for a take a maker accepted;
// ErrNotFound when none is.
func (s *Store) TakeAnswer(take string) ([]byte, error) { return s.get(answerKey(take)) }
