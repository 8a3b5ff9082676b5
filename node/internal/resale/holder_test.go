package resale

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// holderNode is a holder of leases with resale asks, as a take of one
// sees it.
type holderNode struct {
	Node                     // any other method panics: these takes must not reach it
	asks   map[string]string // resale ask → lease
	leases map[string]*Lease
}

func (h *holderNode) ResaleOf(order string) string { return h.asks[order] }
func (h *holderNode) Lease(id string) (Lease, error) {
	if l := h.leases[id]; l != nil {
		return *l, nil
	}
	return Lease{}, store.ErrNotFound
}

// TestHolderTakeStates drives the holder's rows of the state table that
// come before the provider is asked (package doc): each take out of turn
// refused with a signed Reject for its take, with its reason counted; a
// take that checks reaches the provider (here unreachable, so refused as
// provider-unreachable: the negative control that the checks let an honest
// take through); a take of an order that is no resale ask is not this
// package's.
func TestHolderTakeStates(t *testing.T) {
	holder, buyer, stranger, prov := newParty(t), newParty(t), newParty(t), newParty(t)
	h, err := p2p.NewHost(p2p.HostConfig{Key: holder.key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	const mkt = "nvidia-h100-sxm5-80gb"
	now := time.UnixMilli(time.Now().UnixMilli())
	terms := &proto.Lease{Id: "L", Provider: []byte(prov.id), Buyer: []byte(holder.id), Gpus: []string{"g1", "g2"}, PriceMicros: 2_000_000,
		Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED, DurationS: 3600, BillingIntervalS: 1,
		StartUnixMs: now.Add(-time.Minute).UnixMilli(), Market: mkt}
	rest := market.LeaseEnd(terms).Sub(now).Truncate(time.Second)
	node := &holderNode{asks: map[string]string{"ask": "L", "ask-gone": "gone"},
		leases: map[string]*Lease{"L": {ID: "L", Peer: prov.id, Role: market.RoleBuyer, State: market.LeaseRunning, Terms: terms}}}
	books := exchange.New(exchange.Config{})
	for _, id := range []string{"ask", "ask-gone", "plain"} {
		ask := market.Order{ID: id, Maker: holder.id.String(), Side: market.Ask, Market: mkt, Currency: "USD", Quantity: 2, Price: 2_600_000,
			LeaseType: market.Reserved, MinDuration: time.Second, MaxDuration: rest, Created: now, Expires: now.Add(time.Hour),
			AllOrNone: true, PostOnly: true}
		if err := books.With(mkt, "USD", func(s *exchange.Replica) {
			if err := s.Book.Add(&ask, now); err != nil {
				t.Fatal(err)
			}
		}); err != nil {
			t.Fatal(err)
		}
	}
	rejects := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "rejects"}, []string{"kind", "reason"})
	m := New(Config{Host: h, Key: holder.key, Store: st, Books: books, Now: func() time.Time { return now },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Rejects: rejects, Node: node})

	type takeArgs struct {
		by, orderBy party
		ask         string
		qty         uint32
		price       int64
		lt          proto.LeaseType
		dur         time.Duration
	}
	var n int64
	newTake := func(a takeArgs) (*proto.Take, []byte) {
		n++
		bid := &proto.Order{Maker: []byte(a.orderBy.id), Side: proto.Side_SIDE_BID, Market: mkt, Currency: "USD", Quantity: a.qty,
			PriceMicros: a.price, LeaseType: a.lt, DurationS: int64(a.dur / time.Second), CreatedUnixMs: now.UnixMilli(),
			ExpiresUnixMs: now.Add(time.Minute).UnixMilli(), Nonce: uint64(n), TimeInForce: proto.TimeInForce_TIME_IN_FORCE_IOC}
		bidEnv, err := p2p.Seal(a.orderBy.key, bid, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		take := &proto.Take{Taker: []byte(a.by.id), Market: mkt, MakerOrderId: a.ask, TakerOrder: bidEnv, Quantity: a.qty,
			PriceMicros: a.price, Currency: "USD", LeaseType: a.lt, DurationS: bid.DurationS, CreatedUnixMs: now.UnixMilli() + n}
		env, err := p2p.Seal(a.by.key, take, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		return take, env
	}
	honest := takeArgs{by: buyer, orderBy: buyer, ask: "ask", qty: 2, price: 2_600_000, lt: proto.LeaseType_LEASE_TYPE_RESERVED, dur: rest}
	with := func(f func(*takeArgs)) takeArgs { a := honest; f(&a); return a }
	for _, c := range []struct {
		name   string
		take   takeArgs
		before func() (after func())
		refuse string // "": not a resale ask's take
	}{
		{"a take of an order that is no resale ask", with(func(a *takeArgs) { a.ask = "plain" }), nil, ""},
		{"offered, the lease claimed by another take", honest, func() func() {
			release, _ := m.claim("L")
			return release
		}, "busy"},
		{"offered, a lease this node no longer holds", with(func(a *takeArgs) { a.ask = "ask-gone" }), nil, "not-holder"},
		{"offered, the taker order not the taker's", with(func(a *takeArgs) { a.orderBy = stranger }), nil, "schema"},
		{"offered, a take of one GPU of two", with(func(a *takeArgs) { a.qty = 1 }), nil, "wrong-gpus"},
		{"offered, a take at another price", with(func(a *takeArgs) { a.price = 2_700_000 }), nil, "wrong-price"},
		{"offered, a take of spot time", with(func(a *takeArgs) { a.lt = proto.LeaseType_LEASE_TYPE_SPOT }), nil, "not-reserved"},
		{"offered, a bid shorter than the block's rest by more than the slack", with(func(a *takeArgs) { a.dur = rest - market.ResaleDurationSlack - time.Second }), nil, "wrong-duration"},
		{"offered, an honest take: the provider is asked (unreachable here)", honest, nil, "provider-unreachable"},
		{"sold, any take", honest, func() func() {
			if err := st.PutSignedPremium("resale/sold/L", &proto.SignedPremium{Premium: []byte("p")}); err != nil {
				t.Fatal(err)
			}
			return nil
		}, "already-resold"},
	} {
		var after func()
		if c.before != nil {
			after = c.before()
		}
		take, env := newTake(c.take)
		takeID := proto.CIDOf(env).String()
		var before float64
		if c.refuse != "" {
			before = countOf(rejects, "resale-take", c.refuse)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		reply, ok := m.HandleTake(ctx, c.take.by.id, take, env, takeID)
		cancel()
		if after != nil {
			after()
		}
		if c.refuse == "" {
			if ok || reply != nil {
				t.Errorf("%s: answered %v, want it left to the take protocol", c.name, reply)
			}
			continue
		}
		rj, signer, err := p2p.Open[*proto.Reject](reply.GetReject(), proto.MaxBookMessageSize)
		if !ok || err != nil || signer != holder.id || rj.TakeId != takeID {
			t.Errorf("%s: reply %v (%v), want the holder's signed Reject of this take", c.name, reply, err)
			continue
		}
		if got := countOf(rejects, "resale-take", c.refuse); got != before+1 {
			t.Errorf("%s: %q; rejects{resale-take,%s} %v → %v, want counted", c.name, rj.Reason, c.refuse, before, got)
		}
	}
	if _, busy := m.claims["L"]; busy {
		t.Error("a claim outlived its take")
	}
}
