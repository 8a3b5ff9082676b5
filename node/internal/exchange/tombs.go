package exchange

import (
	"bytes"
	"time"

	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/proto"
)

// maxTombs bounds the cancels, and separately the fills, one market keeps
// as tombstones. Past it a new one is not kept (and counted): an honest
// market stays far below (its orders are capped at MaxRestingOrders a
// replica).
const maxTombs = 2 * market.MaxRestingOrders

// tombs are what a market's replicas keep of orders that left the book by
// a cancel or a fill, so that anti-entropy carries them: a replica that
// missed a cancel or a fill gets it from a peer that has it, and one that
// has it never rests the order again. Each is kept until no replica could
// hold the order any more: a cancel until the order's expiry, a fill as
// long as a book remembers fill IDs. Guarded by the Books lock.
type tombs struct {
	cancels map[cancelKey]*cancelTomb
	fills   map[string]*fillTomb // by fill ID
}

type cancelKey struct{ maker, id string }

type cancelTomb struct {
	env     []byte // the sealed cancel; nil until this node's own is sealed
	order   []byte // the sealed order it withdraws, when known
	expires time.Time
}

type fillTomb struct {
	msg     *proto.Fill
	parties [2]string // buyer, provider
	raw     []byte    // msg, marshalled deterministically
	at      time.Time
	expires time.Time
}

// tombsOf returns the tombstones of mkt, creating them. Callers hold b.mu.
func (b *Books) tombsOf(mkt string) *tombs {
	t, ok := b.tombs[mkt]
	if !ok {
		t = &tombs{cancels: map[cancelKey]*cancelTomb{}, fills: map[string]*fillTomb{}}
		b.tombs[mkt] = t
	}
	return t
}

// cancelled reports whether o's maker cancelled it; env, o's envelope, is
// kept with the cancel when it was not known.
func (t *tombs) cancelled(o *market.Order, env []byte) bool {
	c, ok := t.cancels[cancelKey{o.Maker, o.ID}]
	if !ok {
		return false
	}
	if c.order == nil {
		c.order, c.expires = env, o.Expires
	}
	return true
}

// addCancel keeps a cancel of maker's order id until exp, with its sealed
// form env and the order's orderEnv where known. Of two different cancels
// of one order the smaller bytes win, so that replicas keep the same one.
// It reports false when the tombstones are full.
func (t *tombs) addCancel(id, maker string, env, orderEnv []byte, exp time.Time) bool {
	k := cancelKey{maker, id}
	c, ok := t.cancels[k]
	if !ok {
		if len(t.cancels) >= maxTombs {
			return false
		}
		t.cancels[k] = &cancelTomb{env: env, order: orderEnv, expires: exp}
		return true
	}
	if env != nil && (c.env == nil || bytes.Compare(env, c.env) < 0) {
		c.env = env
	}
	if c.order == nil && orderEnv != nil {
		c.order, c.expires = orderEnv, exp
	}
	return true
}

// addFill keeps an applied fill as long as books remember fill IDs (a
// day past its time). It reports false when the tombstones are full.
func (t *tombs) addFill(f market.Fill, msg *proto.Fill) bool {
	if _, ok := t.fills[f.ID]; ok {
		return true
	}
	if len(t.fills) >= maxTombs {
		return false
	}
	raw, err := gproto.MarshalOptions{Deterministic: true}.Marshal(msg)
	if err != nil {
		return true
	}
	t.fills[f.ID] = &fillTomb{msg: msg, parties: [2]string{f.Buyer, f.Provider}, raw: raw, at: f.Time, expires: f.Time.Add(market.MaxOrderTTL + market.MaxClockSkew)}
	return true
}

// sweep forgets the tombstones that expired by now.
func (t *tombs) sweep(now time.Time) {
	for k, c := range t.cancels {
		if !c.expires.After(now) {
			delete(t.cancels, k)
		}
	}
	for id, f := range t.fills {
		if !f.expires.After(now) {
			delete(t.fills, id)
		}
	}
}
