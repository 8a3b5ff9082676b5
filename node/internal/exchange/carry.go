package exchange

import (
	"slices"

	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// What anti-entropy carries: the elements of stamped makers.
//
// Gossip's admission (admission.go) lets each replica take in a few
// makers it does not know per second, and a free key's order stops at
// the first hop that has no token for it. Sync and reconciliation used to
// carry every element a replica held, so a free key that one first hop
// admitted reached every replica anyway, each verifying it: at 300
// simulated nodes under --attack, the orders of free keys admitted at
// the first hops kept every replica's verifier busy and an honest order
// took minutes to cross the network (BENCHMARKS.md, stop 31).
//
// So a replica's snapshots (elements: its reconciliation and its sync
// answers) list only the elements of makers it holds a stamp for (an
// order's or a cancel's maker, either party of a fill), each with that
// stamp beside it, and its own (with its stamp once ground); and it
// refuses, before any verify, an element of a sync or reconciliation
// answer that comes with no stamp of its maker or party and whose makers
// it holds none for ("unstamped"). The rule is the same at every replica,
// and an element travels with the stamp that lets its receiver list it
// too, so two replicas list the same elements of what they both hold and
// reconciliation still settles; the elements of makers without a stamp
// spread by gossip alone, held to admission's budgets at every hop.
//
// A replica learns a maker's stamp from any message that carries one (one
// SHA-256 to check it) and keeps up to maxKnownMakers of them. The work a
// stamp must prove (AdmissionConfig.StampBits) is the network's: a node
// that asks more than its peers' stamps prove takes their elements by
// gossip only, and one whose own stamp proves less than they ask is
// carried by none of them. An honest node's messages carry its stamp,
// except while it grinds the stamp (seconds, once per identity): what it
// publishes meanwhile reaches its neighbours (admission.go), and its own
// reconciliations offer it with the stamp once there is one. AdmissionConfig.Off carries every element,
// as before stamps (the tests' negative control).

// noteStampLocked records stamp as maker's (id) when it proves the
// admission's work, and reports whether this replica holds a stamp for
// maker now. Callers hold b.mu.
func (b *Books) noteStampLocked(id peer.ID, maker string, stamp []byte) bool {
	if _, ok := b.stamps[maker]; ok {
		return true
	}
	if !b.stamped(id, stamp) {
		return false
	}
	if len(b.stamps) >= maxKnownMakers {
		for m := range b.stamps {
			delete(b.stamps, m)
			break
		}
	}
	b.stamps[maker] = slices.Clone(stamp)
	return true
}

// noteEventStamp records the stamp that travelled beside ev for the
// maker or the party it proves work for.
func (b *Books) noteEventStamp(ev *p2p.BookEvent) {
	if len(ev.MakerStamp) == 0 {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range eventMakers(ev) {
		if b.noteStampLocked(makerID(m), m, ev.MakerStamp) {
			return
		}
	}
}

// eventMakers are the makers of a verified event: an order's or a
// cancel's maker, a fill's buyer and provider.
func eventMakers(ev *p2p.BookEvent) []string {
	switch ev.Kind {
	case p2p.KindOrder:
		return []string{ev.Order.Maker}
	case p2p.KindCancel:
		if id, err := peer.IDFromBytes(ev.Cancel.GetMaker()); err == nil {
			return []string{id.String()}
		}
	case p2p.KindFill:
		return []string{ev.Fill.Buyer, ev.Fill.Provider}
	}
	return nil
}

// makerID is the peer ID a maker's name encodes (tests' makers, which
// are no peer IDs, stand for their own bytes).
func makerID(maker string) peer.ID {
	id, err := peer.Decode(maker)
	if err != nil {
		return peer.ID(maker)
	}
	return id
}

// carryLocked reports whether snapshots list the elements of maker, and
// the stamp they travel with. Callers hold b.mu.
func (b *Books) carryLocked(maker string) (stamp []byte, ok bool) {
	if b.selfMaker(maker) {
		return b.Stamp(), true
	}
	stamp, ok = b.stamps[maker]
	return stamp, ok || b.adm.cfg.Off
}

// carryFillLocked is carryLocked for a fill of parties: listed when
// either party is, with the stamp of the first that has one.
func (b *Books) carryFillLocked(parties [2]string) (stamp []byte, ok bool) {
	s0, ok0 := b.carryLocked(parties[0])
	s1, ok1 := b.carryLocked(parties[1])
	if s0 == nil {
		s0 = s1
	}
	return s0, ok0 || ok1
}

// refuseUnstamped reports why an element of a sync or reconciliation
// answer is refused before it is verified, or "": with admission on, one
// of the identities it claims (p2p.StampSigners) must be this node or a
// maker this replica holds a stamp for, or the stamp beside it must prove
// work for one of them.
func (b *Books) refuseUnstamped(data []byte) string {
	if b.adm.cfg.Off {
		return ""
	}
	var msg proto.BookMessage
	if gproto.Unmarshal(data, &msg) != nil {
		return "" // DecodeBook says why
	}
	signers := p2p.StampSigners(&msg)
	if signers == nil {
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, id := range signers {
		if m := id.String(); b.selfMaker(m) || b.noteStampLocked(id, m, msg.MakerStamp) {
			return ""
		}
	}
	return "unstamped"
}
