package node

import (
	"errors"
	"fmt"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/node/internal/trade"
	"github.com/suanli/suanli/proto"
)

// A take is answered once (the state machine is package trade's). The
// maker keeps the answer it gave to each take (by take ID, the CID of the
// signed take) for as long as the take could still be accepted; the same take again, replayed or sent twice at
// once, gets that answer and nothing else: it never holds more GPUs,
// rewrites the lease's terms or makes a second fill. An accept is kept in
// Badger with the lease's terms, in one synced transaction
// (store.PutAcceptedTake), so a restarted maker answers it the same way;
// a reject is kept in memory only (trade.Answers), a few per taker.
//
// A take is fresh when created no more than maxTakeAge before the maker
// receives it and no more than market.MaxClockSkew after: the accept
// window plus the clock skew the market allows between peers. A stale
// take is refused, so an answer is never needed for longer than that.
const maxTakeAge = acceptWindow + market.MaxClockSkew

// takeFresh says why a take created at created is not fresh at now, or "".
func takeFresh(created, now time.Time) string {
	return trade.Fresh(created, now, maxTakeAge, market.MaxClockSkew)
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
