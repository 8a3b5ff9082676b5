package node

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/proto"
)

// A take is answered once. The maker keeps the answer it gave to each
// take (by take ID, the CID of the signed take) for as long as the take
// could still be accepted; the same take again, replayed or sent twice at
// once, gets that answer and nothing else: it never holds more GPUs,
// rewrites the lease's terms or makes a second fill. An accept is kept in
// Badger with the lease's terms, in one synced transaction
// (store.PutAcceptedTake), so a restarted maker answers it the same way;
// a reject is kept in memory only, a few per taker.
//
// A take is fresh when created no more than maxTakeAge before the maker
// receives it and no more than market.MaxClockSkew after: the accept
// window plus the clock skew the market allows between peers. A stale
// take is refused, so an answer is never needed for longer than that.
const (
	maxTakeAge = acceptWindow + market.MaxClockSkew
	// maxAnswersPerPeer bounds the answers kept in memory for one taker;
	// beyond it the oldest answered one is forgotten (an accept stays in
	// Badger).
	maxAnswersPerPeer = 64
)

// takeFresh says why a take created at created is not fresh at now, or "".
func takeFresh(created, now time.Time) string {
	switch {
	case now.Sub(created) > maxTakeAge:
		return fmt.Sprintf("take created %s, more than %s before it arrived", created.UTC().Format(time.RFC3339Nano), maxTakeAge)
	case created.Sub(now) > market.MaxClockSkew:
		return fmt.Sprintf("take created %s, in the future", created.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// answer is one take's answer, or the promise of one: done is closed
// once reply is set (nil: the maker gave none).
type answer struct {
	id    string
	from  peer.ID
	until time.Time
	done  chan struct{}
	reply *proto.TradeReply
}

// answers are the takes this maker is answering or answered lately.
type answers struct {
	mu     sync.Mutex
	byID   map[string]*answer
	byPeer map[peer.ID][]*answer // oldest first
	swept  time.Time
}

var errTooManyTakes = errors.New("too many takes in flight from this peer")

// claim returns the answer of take id from a peer and whether the caller
// is the first to ask: the first must settle it; any other waits for it.
func (a *answers) claim(id string, from peer.ID, until, now time.Time) (*answer, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID == nil {
		a.byID, a.byPeer = map[string]*answer{}, map[peer.ID][]*answer{}
	}
	if now.Sub(a.swept) > time.Minute {
		a.sweepLocked(now)
	}
	if e, ok := a.byID[id]; ok && now.Before(e.until) {
		return e, false, nil
	}
	list := a.byPeer[from]
	if len(list) >= maxAnswersPerPeer {
		// Forget the oldest answered one; if all are in flight, refuse.
		i := 0
		for i < len(list) && !list[i].settled() {
			i++
		}
		if i == len(list) {
			return nil, false, errTooManyTakes
		}
		delete(a.byID, list[i].id)
		list = append(list[:i], list[i+1:]...)
	}
	e := &answer{id: id, from: from, until: until, done: make(chan struct{})}
	a.byID[id] = e
	a.byPeer[from] = append(list, e)
	return e, true, nil
}

// settle sets the answer of a claimed take.
func (a *answers) settle(e *answer, reply *proto.TradeReply) {
	a.mu.Lock()
	e.reply = reply
	a.mu.Unlock()
	close(e.done)
}

func (e *answer) settled() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// wait is the answer of a take another caller claimed.
func (e *answer) wait(ctx context.Context) *proto.TradeReply {
	select {
	case <-e.done:
		return e.reply
	case <-ctx.Done():
		return nil
	}
}

// sweepLocked forgets the settled answers of takes no longer fresh.
func (a *answers) sweepLocked(now time.Time) {
	a.swept = now
	for p, list := range a.byPeer {
		keep := list[:0]
		for _, e := range list {
			if now.Before(e.until) || !e.settled() {
				keep = append(keep, e)
			} else {
				delete(a.byID, e.id)
			}
		}
		if len(keep) == 0 {
			delete(a.byPeer, p)
		} else {
			a.byPeer[p] = keep
		}
	}
}

// size is how many answers are kept, for tests.
func (a *answers) size() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID)
}

// storedAnswer is the accept this maker stored for take id, if any.
func (n *Node) storedAnswer(id string) (*proto.TradeReply, error) {
	b, err := n.store.TakeAnswer(id)
	if errors.Is(err, store.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var r proto.TradeReply
	if err := gproto.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("%w: stored answer of take %s: %v", store.ErrCorrupt, id, err)
	}
	return &r, nil
}
