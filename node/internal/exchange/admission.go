package exchange

import (
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Admission of new makers: a Sybil with fresh keys gets nothing for free.
//
// A valid order costs its maker nothing to sign, and every replica that
// accepts it verifies it and relays it to its mesh, so an attacker who
// signs each order with a brand new key would have every replica verify
// every order (MaxOrdersPerMaker does not help: each key has one). A
// replica therefore admits orders only from makers it knows; a maker it
// does not know yet is admitted at a bounded rate, and an order whose
// maker was not admitted is ignored: not applied, not relayed (it stops
// at the first hop that refuses it), counted as "new-maker-limited". An
// order of a maker with neither a stamp nor a fill, or a fill neither of
// whose parties has one, is kept but not relayed either
// ("new-maker-not-relayed", relayedLocked), however it was admitted (a
// neighbour's own order included): a free key's order reaches the
// replicas it is sent to and no further, so the network verifies it a
// handful of times, not once per replica (sync and reconciliation do not
// carry it either: carry.go). An honest node's orders carry its stamp,
// except while it grinds it (seconds, once per identity): those reach its
// neighbours only. At 300 simulated nodes under --attack an honest order
// then reached every replica in 0.13–0.19 s, as without the attack,
// instead of 7–22 s (BENCHMARKS.md, stop 32).
//
// Known makers (admitted without a token): this node; a party to a fill
// the replica applied; a maker with an order resting in a replica; a
// maker admitted before (remembered, up to maxKnownMakers); a peer this
// node's host holds addresses for (a node of the network it met, by a
// connection or the DHT, not a key made up for one message); and the
// peer that relays the order when it is its maker (a neighbour
// publishing its own order: one identity per connection).
//
// Any other maker of a gossiped order needs a token of the relaying
// peer's bucket (newMakerPeerRate) and of the replica's
// (newMakerRate): one peer's flood cannot use the whole budget, and the
// whole budget bounds what a replica verifies and relays for new makers
// whatever the number of peers. Sync and reconciliation answers are not
// held to a new-maker budget by default (newMakerSyncRate is unbounded;
// AdmissionConfig.SyncRate sets one): they are bounded per peer already
// by syncAnswerRate and the reconciliation's rate and budget per round,
// and a shared bucket there lets a flood admitted anywhere starve the
// honest makers' orders reconciliation brings (with one, burst 2000 at
// 20/s, a 100-node simnet under --attack did not converge).
//
// Honest new makers still get in: a new maker's own node is a neighbour
// of its first hops (admitted there without a token) and is in most
// replicas' peerstores, and its order travels with its stamp; where a
// replica's bucket is empty, the order is refused only by gossip, and the
// periodic reconciliation (DefaultReconcileInterval), which carries every
// stamped maker's orders (a new maker's up to MaxOrdersNewMaker), brings
// it: a delay of about one reconciliation round per hop that refused it.
// So for a stamped maker gossip's admission decides how fast its order
// spreads, not whether.
//
// Stamped new makers have a lane of their own. A new maker whose order
// travels with its stamp (p2p/stamp.go: StampBits of work bound to its
// peer ID, ground once per identity) spends tokens of other buckets
// (stampedRate and stampedPeerRate, larger), so a flood of free keys,
// however fast, never spends a stamped newcomer's budget; a Sybil that
// drains the stamped lane pays a stamp (seconds of a core) per key.
//
// What a paid identity buys is bounded too: a maker not yet established
// (not this node, not a party to a fill the replica applied) rests at
// most MaxOrdersNewMaker orders per replica (an established one
// MaxOrdersPerMaker) and gets newMakerOrderRate orders a second through
// the validator, refused before their verify (RefuseEarly) past it, so
// the orders each stamp puts before every replica's verifier are few.
const (
	// newMakerRate and newMakerBurst bound the new makers a replica
	// admits from gossip per second, whoever relays them.
	newMakerRate  = 2
	newMakerBurst = 20
	// newMakerPeerRate and newMakerPeerBurst bound the new makers one
	// relaying peer gets admitted per second.
	newMakerPeerRate  = 1
	newMakerPeerBurst = 10
	// newMakerSyncRate and newMakerSyncBurst bound the new makers a
	// replica admits from sync and reconciliation answers: unbounded.
	newMakerSyncRate  = rate.Inf
	newMakerSyncBurst = 1
	// stampedRate and stampedBurst bound the stamped new makers a replica
	// admits from gossip per second; stampedPeerRate and
	// stampedPeerBurst those one relaying peer gets admitted.
	stampedRate      = 10
	stampedBurst     = 40
	stampedPeerRate  = 5
	stampedPeerBurst = 20
	// newMakerOrderRate and newMakerOrderBurst bound the orders a second
	// of one maker not yet established (orderRate once it is).
	newMakerOrderRate  = 1
	newMakerOrderBurst = 5
	// MaxOrdersNewMaker caps the resting orders of a maker not yet
	// established (see MaxOrdersPerMaker).
	MaxOrdersNewMaker = 5
	// maxKnownMakers bounds the makers a node remembers as admitted or
	// established; past it, arbitrary admitted (not established) ones
	// are forgotten first.
	maxKnownMakers = 100_000
)

// AdmissionConfig tunes new-maker admission; the zero value is the
// defaults above.
type AdmissionConfig struct {
	// Off admits every maker, as before admission existed (tests use it
	// as the negative control).
	Off bool
	// Rate and Burst: the replica's bucket for new makers from gossip;
	// PeerRate and PeerBurst: each relaying peer's; SyncRate and
	// SyncBurst: sync and reconciliation answers'; StampedRate and
	// StampedBurst, StampedPeerRate and StampedPeerBurst: the lane of
	// stamped new makers. Zero: the default.
	Rate, PeerRate, SyncRate, StampedRate, StampedPeerRate      rate.Limit
	Burst, PeerBurst, SyncBurst, StampedBurst, StampedPeerBurst int
	// StampBits is the work a maker's stamp must prove to use the
	// stamped lane; zero: p2p.DefaultStampBits.
	StampBits int
}

func (c AdmissionConfig) withDefaults() AdmissionConfig {
	def := func(l *rate.Limit, b *int, dl rate.Limit, db int) {
		if *l == 0 {
			*l = dl
		}
		if *b == 0 {
			*b = db
		}
	}
	def(&c.Rate, &c.Burst, newMakerRate, newMakerBurst)
	def(&c.PeerRate, &c.PeerBurst, newMakerPeerRate, newMakerPeerBurst)
	def(&c.SyncRate, &c.SyncBurst, newMakerSyncRate, newMakerSyncBurst)
	def(&c.StampedRate, &c.StampedBurst, stampedRate, stampedBurst)
	def(&c.StampedPeerRate, &c.StampedPeerBurst, stampedPeerRate, stampedPeerBurst)
	if c.StampBits == 0 {
		c.StampBits = p2p.DefaultStampBits
	}
	return c
}

// admission is a Books' state for admitting makers; guarded by b.mu.
type admission struct {
	cfg   AdmissionConfig
	known map[string]bool // maker -> established (party to a fill)
	all   *rate.Limiter   // new makers from gossip
	sync  *rate.Limiter   // new makers from sync and reconciliation
	peers map[peer.ID]*rate.Limiter
	// The stamped lane: new makers with a stamp, from gossip.
	stamped *rate.Limiter
	speers  map[peer.ID]*rate.Limiter
	// Orders of makers not yet established, by maker.
	newOrders map[string]*rate.Limiter
}

// lane is a new maker's pair of buckets: the replica's and the relaying
// peers', and the reasons their refusals are counted under.
func (a *admission) lane(stamped bool) (all *rate.Limiter, peers map[peer.ID]*rate.Limiter, r rate.Limit, burst int, why, whyPeer string) {
	if stamped {
		return a.stamped, a.speers, a.cfg.StampedPeerRate, a.cfg.StampedPeerBurst, "stamped-limited", "stamped-peer-limited"
	}
	return a.all, a.peers, a.cfg.PeerRate, a.cfg.PeerBurst, "new-maker-limited", "new-maker-peer-limited"
}

func newAdmission(cfg AdmissionConfig) *admission {
	cfg = cfg.withDefaults()
	return &admission{
		cfg:   cfg,
		known: map[string]bool{},
		all:   rate.NewLimiter(cfg.Rate, cfg.Burst),
		sync:  rate.NewLimiter(cfg.SyncRate, cfg.SyncBurst),
		peers: map[peer.ID]*rate.Limiter{},

		stamped:   rate.NewLimiter(cfg.StampedRate, cfg.StampedBurst),
		speers:    map[peer.ID]*rate.Limiter{},
		newOrders: map[string]*rate.Limiter{},
	}
}

// remember marks maker known (established: a fill party), forgetting an
// arbitrary not-established maker when full.
func (a *admission) remember(maker string, established bool) {
	if est, ok := a.known[maker]; ok {
		if established && !est {
			a.known[maker] = true
		}
		return
	}
	if len(a.known) >= maxKnownMakers {
		victim, found := "", false
		for m, est := range a.known {
			victim = m
			if found = !est; found {
				break
			}
		}
		delete(a.known, victim)
	}
	a.known[maker] = established
}

func (a *admission) hasKnown(maker string) bool {
	_, ok := a.known[maker]
	return ok
}

// knownLocked reports whether maker needs no token to be admitted from
// from (empty: a sync or reconciliation answer). Callers hold b.mu.
func (b *Books) knownLocked(maker string, from peer.ID) bool {
	a := b.adm
	if a.cfg.Off || a.hasKnown(maker) || b.selfMaker(maker) {
		return true
	}
	for _, s := range b.states {
		if len(s.count[maker]) > 0 {
			return true
		}
	}
	if from != "" && from.String() == maker {
		return true
	}
	if b.cfg.Host != nil {
		if id, err := peer.Decode(maker); err == nil && len(b.cfg.Host.Peerstore().Addrs(id)) > 0 {
			return true
		}
	}
	return false
}

// admitLocked decides whether an order of maker, relayed by from (empty
// for sync and reconciliation answers) with stamp beside it, may be
// checked further. It returns the refusal reason, or "" when admitted.
// Callers hold b.mu.
func (b *Books) admitLocked(maker string, from peer.ID, stamp []byte) string {
	a := b.adm
	if b.knownLocked(maker, from) {
		if !a.cfg.Off {
			a.remember(maker, false)
		}
		return ""
	}
	if from == "" {
		if !a.sync.Allow() {
			return "new-maker-limited"
		}
		a.remember(maker, false)
		return ""
	}
	all, peers, r, burst, why, whyPeer := a.lane(b.stamped(makerID(maker), stamp))
	if all.Tokens() < 1 {
		return why
	}
	if !p2p.AllowIn(peers, from, r, burst) {
		return whyPeer
	}
	if !all.Allow() {
		return why
	}
	a.remember(maker, false)
	return ""
}

// stamped reports whether stamp proves the admission's work for maker.
func (b *Books) stamped(maker peer.ID, stamp []byte) bool {
	return len(stamp) > 0 && p2p.VerifyStamp(maker, stamp, b.adm.cfg.StampBits)
}

// establishedLocked reports whether maker is held to orderRate and
// MaxOrdersPerMaker (not the new makers' limits). Callers hold b.mu.
func (b *Books) establishedLocked(maker string) bool {
	return b.adm.cfg.Off || b.adm.known[maker] || b.selfMaker(maker)
}

// allowMaker spends a token of maker's order rate: orderRate once
// established, newMakerOrderRate before.
func (b *Books) allowMaker(maker string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.establishedLocked(maker) {
		return p2p.AllowIn(b.limiters, maker, orderRate, orderBurst)
	}
	return p2p.AllowIn(b.adm.newOrders, maker, newMakerOrderRate, newMakerOrderBurst)
}

// RefuseEarly reports why a gossiped book message authored by author
// and relayed by from is ignored before its signatures are verified, or
// "": an order of a maker, or a fill of two parties, that admission
// would refuse now, whatever its content. It spends no token
// and verifies nothing, so a Sybil's flood past the budgets costs a
// replica gossipsub's own signature check and a map lookup, not a
// second verify.
func (b *Books) RefuseEarly(data []byte, author, from peer.ID) string {
	maker := author.String()
	b.mu.Lock()
	known := b.knownLocked(maker, from)
	slow := false // a known maker out of its new-maker order rate
	if known && !b.establishedLocked(maker) {
		l, ok := b.adm.newOrders[maker]
		slow = ok && l.Tokens() < 1
	}
	b.mu.Unlock()
	if known && !slow {
		return ""
	}
	var msg proto.BookMessage
	if gproto.Unmarshal(data, &msg) != nil {
		return "" // DecodeBook says why
	}
	var stamped bool
	switch msg.Body.(type) {
	case *proto.BookMessage_Order:
		if slow {
			return "new-maker-rate-limited"
		}
		stamped = b.stamped(author, msg.MakerStamp) // one hash, no lock
	case *proto.BookMessage_Fill:
		if known {
			return ""
		}
		// Either party known admits it (admitFillLocked); their names
		// are read from the envelopes, unverified.
		signers := p2p.StampSigners(&msg)
		b.mu.Lock()
		for _, id := range signers {
			if b.knownLocked(id.String(), from) {
				b.mu.Unlock()
				return ""
			}
		}
		b.mu.Unlock()
		for _, id := range signers {
			stamped = stamped || b.stamped(id, msg.MakerStamp)
		}
	default:
		return ""
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	all, peers, _, _, why, whyPeer := b.adm.lane(stamped)
	if all.Tokens() < 1 {
		return why
	}
	if l, ok := peers[from]; ok && l.Tokens() < 1 {
		return whyPeer
	}
	return ""
}

// selfMaker reports whether maker is this node.
func (b *Books) selfMaker(maker string) bool {
	return b.self != "" && maker == b.self
}

// capLocked is how many orders maker may rest in one replica. Callers
// hold b.mu.
func (b *Books) capLocked(maker string) int {
	if b.establishedLocked(maker) {
		return MaxOrdersPerMaker
	}
	return MaxOrdersNewMaker
}

// admitFillLocked is admitLocked for a fill relayed by from with stamp
// beside it: admitted when either party is known, else as a new maker
// (the party the stamp proves work for, or the buyer). Callers hold b.mu.
func (b *Books) admitFillLocked(f *market.Fill, from peer.ID, stamp []byte) string {
	if b.knownLocked(f.Buyer, from) || b.knownLocked(f.Provider, from) {
		return ""
	}
	party := f.Buyer
	if b.stamped(makerID(f.Provider), stamp) {
		party = f.Provider
	}
	return b.admitLocked(party, from, stamp)
}

// relayedLocked reports whether a message accepted from makers (an
// order's maker, a fill's two parties) is relayed: when one of them is
// one anti-entropy carries (carryLocked: stamped, this node, or admission
// off) or has traded (established). Callers hold b.mu.
func (b *Books) relayedLocked(makers ...string) bool {
	for _, m := range makers {
		if _, carried := b.carryLocked(m); carried || b.establishedLocked(m) {
			return true
		}
	}
	return false
}
