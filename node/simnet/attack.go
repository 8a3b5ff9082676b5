package simnet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"golang.org/x/time/rate"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Names of the attack measures in a Report.
const (
	MeasureAttackProp  = "attack: order propagation (honest)"
	MeasureAttackCross = "attack: crossing -> agreed trade (RTT)"
)

// Hostile behaviour: each hostile peer publishes attackRate messages a
// second on the market's topic through attackKeys identities, each its
// own libp2p host, in turn (flood): valid bids of its own (far below any
// ask, so they rest and fill books) alternating with valid bids each
// signed by a brand new key (a Sybil: the message is authored and signed
// by that key, StrictSign holds, and the hostile host is only its first
// relay), messages whose payload does not validate (an order with a
// broken signature), and replays of bids published before.
const (
	attackRate = 20
	attackKeys = 3
	// attackWait is how long an honest sample may take to reach every
	// replica under attack; attackMissed samples that take longer end
	// the measure.
	attackWait   = time.Minute
	attackMissed = 3
	// stampCost is what one real stamp (p2p.DefaultStampBits) costs a
	// core: 2^24 SHA-256s, about 1.5 s unloaded here. The hostile peers
	// grind StampBits only, and are charged this on cores of their own
	// (Config.AttackCores), so the shared CPU does not pay for it.
	stampCost = 1500 * time.Millisecond
)

// fairCores is the cores hostile hosts get by default: what as many
// honest nodes have here, this machine's cores shared by all the
// simulated nodes. The replicas share them too, so an attacker given a
// core per host would outspend each replica a hundredfold at 300 nodes
// on 2 cores, a contest no real network of peers with a machine each
// faces (--attack-cores sets any other budget).
func fairCores(hostile, nodes int) float64 {
	return float64(hostile) * float64(runtime.GOMAXPROCS(0)) / float64(max(nodes, 1))
}

// stampBudget hands out the stamped identities the hostile peers can pay
// for: Config.AttackCores/stampCost a second, all hosts together.
type stampBudget struct {
	lim  *rate.Limiter
	mu   sync.Mutex
	paid int
}

func newStampBudget(cores float64) *stampBudget {
	return &stampBudget{lim: rate.NewLimiter(rate.Limit(cores/stampCost.Seconds()), 1)}
}

// buy reports whether a stamp is paid for now.
func (b *stampBudget) buy() bool {
	if !b.lim.Allow() {
		return false
	}
	b.mu.Lock()
	b.paid++
	b.mu.Unlock()
	return true
}

// paidIdentity is a stamped hostile maker and the bids it has left
// before a replica holds as many as a new maker may rest.
type paidIdentity struct {
	key   crypto.PrivKey
	id    peer.ID
	stamp []byte
	left  int
}

// hostile is one hostile identity: a host in the mocknet with gossipsub
// joined to the market's topic.
type hostile struct {
	key   crypto.PrivKey
	id    peer.ID
	topic *pubsub.Topic
	sent  []sent
}

// sent is a message a hostile peer published, with the author to replay
// it as.
type sent struct {
	data []byte
	key  crypto.PrivKey
	id   peer.ID
}

// startAttack adds hostile peers (share of the node count, at least one)
// linked to the honest ones, each connected to a few honest nodes of its
// region, and floods until ctx ends. It returns how many identities
// flood, and a wait for the flooding to stop.
func (s *sim) startAttack(ctx context.Context, net *network, share float64) (int, func(), error) {
	n := max(1, int(float64(s.cfg.Nodes)*share+0.5))
	rng := mrand.New(mrand.NewPCG(7, 8))
	var hs []*hostile
	for i := range n * attackKeys {
		k, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			return 0, nil, err
		}
		h, err := s.addHost(k, i, 3)
		if err != nil {
			return 0, nil, err
		}
		ps, err := p2p.NewPubSub(ctx, h)
		if err != nil {
			return 0, nil, err
		}
		top, err := ps.Join(p2p.BookTopic(s.market))
		if err != nil {
			return 0, nil, err
		}
		for range 4 {
			j := rng.IntN(len(net.nodes))
			if nd := net.nodes[j]; nd != nil {
				h.Connect(ctx, peer.AddrInfo{ID: net.hosts[j].ID(), Addrs: net.hosts[j].Addrs()})
			}
		}
		hs = append(hs, &hostile{key: k, id: h.ID(), topic: top})
	}
	cores := s.cfg.AttackCores
	if cores <= 0 {
		cores = fairCores(n, s.cfg.Nodes)
	}
	s.attackCores = cores
	s.stamps = newStampBudget(cores)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s.flood(ctx, hs[i*attackKeys:(i+1)*attackKeys])
		}()
	}
	return len(hs), wg.Wait, nil
}

// sybil is the author of the next Sybil bid: the paid identity while it
// has bids left, else a new one if the budget pays for its stamp, else a
// free key made for this one message (no stamp).
func (s *sim) sybil(ctx context.Context, paid **paidIdentity) (crypto.PrivKey, peer.ID, []byte) {
	if *paid == nil || (*paid).left == 0 {
		*paid = nil
		if s.stamps.buy() {
			key, _, err := crypto.GenerateEd25519Key(rand.Reader)
			if err == nil {
				id, _ := peer.IDFromPrivateKey(key)
				if st, err := p2p.GrindStamp(ctx, id, StampBits); err == nil {
					*paid = &paidIdentity{key: key, id: id, stamp: st, left: exchange.MaxOrdersNewMaker}
				}
			}
		}
	}
	if p := *paid; p != nil {
		p.left--
		return p.key, p.id, p.stamp
	}
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		return nil, "", nil
	}
	id, _ := peer.IDFromPrivateKey(key)
	return key, id, nil
}

// flood publishes from ids in turn until ctx ends. Each identity keeps to
// one role, as an attacker who knows the peer scoring would: the first
// publishes valid bids only, in turn its own and a fresh key's, so no
// validator ever rejects it (gossipsub's invalid-delivery penalty never
// touches it); the second publishes broken signatures (and is graylisted
// by its neighbours for them); the third replays the first's bids.
func (s *sim) flood(ctx context.Context, ids []*hostile) {
	t := time.NewTicker(time.Second / attackRate)
	defer t.Stop()
	valid := ids[0]
	var paid *paidIdentity
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := ids[k%len(ids)]
		m := sent{key: h.key, id: h.id}
		switch {
		case h == valid && (k/len(ids))%2 == 0:
			m.data = orderMsg(hostileBid(s.market, m.key, m.id))
			h.sent = append(h.sent, m)
		case h == valid:
			// A Sybil: a key made for this one message, or a paid
			// (stamped) one while the hostile cores can pay.
			key, id, stamp := s.sybil(ctx, &paid)
			if key == nil {
				continue
			}
			m = sent{key: key, id: id}
			m.data = orderMsg(hostileBid(s.market, key, id), stamp...)
			h.sent = append(h.sent, m)
		case h == ids[1%len(ids)]:
			// Break the order's envelope: flip a byte near its end (the
			// signature).
			if env := hostileBid(s.market, m.key, m.id); env != nil {
				env[len(env)-3] ^= 0xff
				m.data = orderMsg(env)
			}
		default:
			if len(valid.sent) == 0 {
				continue
			}
			m = valid.sent[mrand.IntN(len(valid.sent))]
		}
		if len(h.sent) > 1000 {
			h.sent = h.sent[len(h.sent)-1000:]
		}
		if m.data != nil {
			var opts []pubsub.PubOpt
			if m.id != h.id {
				// Signed as its author, published (first relayed) by h.
				opts = append(opts, pubsub.WithSecretKeyAndPeerId(m.key, m.id))
			}
			h.topic.Publish(ctx, m.data, opts...)
		}
	}
}

// heldOrders is how many orders each live replica of the market holds,
// sorted (at least one entry): what a flood has put into the books.
func (s *sim) heldOrders(net *network) []int {
	out := []int{0}
	for _, n := range net.nodes {
		if n != nil {
			_, orders, _ := n.BookDigest(s.market, "USD")
			out = append(out, orders)
		}
	}
	if len(out) > 1 {
		out = out[1:]
	}
	slices.Sort(out)
	return out
}

// orderMsg is the book message of a sealed order with its maker's stamp
// (none: unstamped), nil for nil.
func orderMsg(env []byte, stamp ...byte) []byte {
	if env == nil {
		return nil
	}
	data, err := p2p.MarshalBook(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}, MakerStamp: stamp})
	if err != nil {
		return nil
	}
	return data
}

// hostileBid is a valid resting bid in market mkt of the maker id (key's), sealed,
// unique by its nonce.
func hostileBid(mkt string, key crypto.PrivKey, id peer.ID) []byte {
	now := time.Now()
	var nonce [8]byte
	rand.Read(nonce[:])
	o := &proto.Order{
		Maker: []byte(id), Side: proto.Side_SIDE_BID, Market: mkt, Currency: "USD", Quantity: 1,
		PriceMicros: 1000 + int64(nonce[0]), LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600,
		CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(10 * time.Minute).UnixMilli(),
		Nonce: binary.BigEndian.Uint64(nonce[:]),
	}
	env, err := p2p.Seal(key, o, proto.MaxBookMessageSize)
	if err != nil {
		return nil
	}
	return env
}

// attack measures honest propagation and crossing while hostile peers
// flood, beside the same run's measures without them.
func (s *sim) attack(ctx context.Context, net *network, rep *Report) error {
	base, ok := rep.Measure(MeasurePropagation)
	if !ok {
		return fmt.Errorf("no propagation measure to compare with")
	}
	held := s.heldOrders(net)
	refusedBefore := bookRefusals(net)
	actx, stop := context.WithCancel(ctx)
	ids, wait, err := s.startAttack(actx, net, s.cfg.Attack)
	if err != nil {
		stop()
		return err
	}
	defer func() { stop(); wait() }()
	rep.HostileIDs, rep.AttackCores = ids, s.attackCores
	s.log.Info("attack: flooding", "identities", ids, "per second", ids/attackKeys*attackRate)
	// Let the flood reach its steady state before measuring.
	time.Sleep(5 * time.Second)
	rng := mrand.New(mrand.NewPCG(9, 10))
	buyers := net.nodes[net.providers:]
	// A sample that never reaches every replica counts as attackWait (a
	// lower bound), and the measure goes on until attackMissed of them.
	var prop []time.Duration
	var missed []error
	for range s.cfg.Samples {
		d, err := s.propagate(ctx, net, buyers[rng.IntN(len(buyers))], rng, attackWait)
		if err != nil {
			if ctx.Err() != nil {
				return err
			}
			missed = append(missed, err)
			d = attackWait
		}
		s.log.Info("attack: honest sample", "n", len(prop)+1, "took", d.Round(time.Millisecond), "missed", err != nil)
		prop = append(prop, d)
		if len(missed) >= attackMissed {
			break
		}
	}
	during := s.heldOrders(net)
	rep.AttackRefusals = refusalsSince(net, refusedBefore)
	s.stamps.mu.Lock()
	rep.AttackStamped = s.stamps.paid
	s.stamps.mu.Unlock()
	rep.add(Measure{Name: MeasureAttackProp, Stats: statsOf(prop), FloorName: "same run, no attack", Floor: base.Stats.P99, Compare: "p99", Goal: 2,
		Note: fmt.Sprintf("%d hostile identities (%.0f%% of the nodes, %d keys each) flood %d msg/s in all: valid bids of their own, valid bids each from a fresh key, broken signatures, replays; %d samples never reached every replica within %s (counted as %[6]s); orders a replica holds (median, max) before the flood %d, %d, after the samples %d, %d",
			ids, 100*s.cfg.Attack, attackKeys, ids/attackKeys*attackRate, len(missed), attackWait, held[len(held)/2], held[len(held)-1], during[len(during)/2], during[len(during)-1])}, false)
	if len(missed) >= attackMissed {
		return fmt.Errorf("propagation under attack: %d samples missed, the last: %w", len(missed), missed[len(missed)-1])
	}
	var scratch Report
	scratch.Floors = rep.Floors
	// Crossing only: discovery from the book starts fresh nodes, minutes
	// at 1,000 nodes, and its figure under attack is not reported.
	if err := s.trades(ctx, net, &scratch, rng, false); err != nil {
		return fmt.Errorf("trades under attack: %w", err)
	}
	if m, ok := scratch.Measure(MeasureCrossing); ok {
		m.Name = MeasureAttackCross
		m.Met = nil
		if b, ok := rep.Measure(MeasureCrossing); ok {
			m.Note = fmt.Sprintf("%s; without the attack p50 %.1f RTT", m.Note, b.Stats.P50)
		}
		rep.add(m, false)
	}
	return nil
}

// refusalsSince is bookRefusals less before: what the replicas refused
// since before was taken, by reason (reasons that did not grow left out).
func refusalsSince(net *network, before map[string]int64) map[string]int64 {
	return since(bookRefusals(net), before)
}

// since returns the counts of out less those of before, leaving out the
// unchanged ones; it changes out.
func since(out, before map[string]int64) map[string]int64 {
	for k, v := range before {
		if out[k] -= v; out[k] == 0 {
			delete(out, k)
		}
	}
	return out
}

// bookRefusals sums the book messages every live replica refused, by
// reason (the nodes' suanli_validation_rejects_total of kind book).
func bookRefusals(net *network) map[string]int64 { return refusals(net.nodes, "book") }

// refusals sums what the given live nodes refused, by reason
// (suanli_validation_rejects_total): of one kind, or of every kind, as
// "kind/reason", when kind is "".
func refusals(nodes []*node.Node, kind string) map[string]int64 {
	out := map[string]int64{}
	for _, n := range nodes {
		if n == nil {
			continue
		}
		mfs, err := n.Gatherer().Gather()
		if err != nil {
			continue
		}
		for _, mf := range mfs {
			if mf.GetName() != "suanli_validation_rejects_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				k, reason := "", ""
				for _, l := range m.GetLabel() {
					switch l.GetName() {
					case "kind":
						k = l.GetValue()
					case "reason":
						reason = l.GetValue()
					}
				}
				switch {
				case kind == "":
					out[k+"/"+reason] += int64(m.GetCounter().GetValue())
				case k == kind:
					out[reason] += int64(m.GetCounter().GetValue())
				}
			}
		}
	}
	return out
}
