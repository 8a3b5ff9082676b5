package trade

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/proto"
)

// MaxPerPeer bounds the answers Answers keeps for one taker; beyond it
// the oldest settled one is forgotten (an accept stays in the node's
// store), and with all in flight a new take is refused (ErrTooManyTakes).
const MaxPerPeer = 64

// ErrTooManyTakes is Claim's answer to a taker with MaxPerPeer takes in
// flight.
var ErrTooManyTakes = errors.New("too many takes in flight from this peer")

// Fresh says why a take created at created is not to be answered at now,
// or "" when it is: created no more than maxAge before now and no more
// than skew after.
func Fresh(created, now time.Time, maxAge, skew time.Duration) string {
	switch {
	case now.Sub(created) > maxAge:
		return fmt.Sprintf("take created %s, more than %s before it arrived", created.UTC().Format(time.RFC3339Nano), maxAge)
	case created.Sub(now) > skew:
		return fmt.Sprintf("take created %s, in the future", created.UTC().Format(time.RFC3339Nano))
	}
	return ""
}

// Answer is one take's answer, or the promise of one.
type Answer struct {
	id    string
	until time.Time
	done  chan struct{}
	reply *proto.TradeReply
}

// Settled reports whether the answer is set.
func (e *Answer) Settled() bool {
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// Wait is the answer once set (nil: the maker gave none), or nil when ctx
// ends first.
func (e *Answer) Wait(ctx context.Context) *proto.TradeReply {
	select {
	case <-e.done:
		return e.reply
	case <-ctx.Done():
		return nil
	}
}

// Answers are the takes a maker is answering or answered lately. The zero
// value is ready; it is safe for concurrent use.
type Answers struct {
	mu     sync.Mutex
	byID   map[string]*Answer
	byPeer map[peer.ID][]*Answer // oldest first
	swept  time.Time
}

// Claim returns the answer of take id from a peer and whether the caller
// is the first to ask: the first must Settle it; any other Waits for it.
// until is when the take stops being fresh: the answer is kept until then.
func (a *Answers) Claim(id string, from peer.ID, until, now time.Time) (*Answer, bool, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.byID == nil {
		a.byID, a.byPeer = map[string]*Answer{}, map[peer.ID][]*Answer{}
	}
	if now.Sub(a.swept) > time.Minute {
		a.sweepLocked(now)
	}
	if e, ok := a.byID[id]; ok && now.Before(e.until) {
		return e, false, nil
	}
	list := a.byPeer[from]
	if len(list) >= MaxPerPeer {
		i := 0
		for i < len(list) && !list[i].Settled() {
			i++
		}
		if i == len(list) {
			return nil, false, ErrTooManyTakes
		}
		delete(a.byID, list[i].id)
		list = append(list[:i], list[i+1:]...)
	}
	e := &Answer{id: id, until: until, done: make(chan struct{})}
	a.byID[id] = e
	a.byPeer[from] = append(list, e)
	return e, true, nil
}

// Settle sets the answer of a claimed take, once.
func (a *Answers) Settle(e *Answer, reply *proto.TradeReply) {
	a.mu.Lock()
	e.reply = reply
	a.mu.Unlock()
	close(e.done)
}

// sweepLocked forgets the settled answers of takes no longer fresh.
func (a *Answers) sweepLocked(now time.Time) {
	a.swept = now
	for p, list := range a.byPeer {
		keep := list[:0]
		for _, e := range list {
			if now.Before(e.until) || !e.Settled() {
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

// Len is how many answers are kept.
func (a *Answers) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.byID)
}

// Kept reports whether take id's answer is kept.
func (a *Answers) Kept(id string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.byID[id]
	return ok
}
