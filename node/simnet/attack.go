package simnet

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// Names of the attack measures in a Report.
const (
	MeasureAttackProp  = "attack: order propagation (honest)"
	MeasureAttackCross = "attack: crossing -> agreed trade (RTT)"
)

// Hostile behaviour: each hostile peer publishes attackRate messages a
// second on the market's topic, in turn a valid bid of its own (far below
// any ask, so it rests and fills books), a message whose payload does not
// validate (an order with a broken signature), and a replay of a bid it
// published before. Each rotates through attackKeys identities, each its
// own libp2p host (StrictSign: an order's maker must be the host that
// publishes it), so the flood of valid orders comes from fresh keys.
const (
	attackRate = 20
	attackKeys = 3
)

// hostile is one hostile identity: a host in the mocknet with gossipsub
// joined to the market's topic.
type hostile struct {
	key   crypto.PrivKey
	id    peer.ID
	topic *pubsub.Topic
	sent  [][]byte
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
		top, err := ps.Join(p2p.BookTopic(Market))
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

// flood publishes from ids in turn until ctx ends.
func (s *sim) flood(ctx context.Context, ids []*hostile) {
	t := time.NewTicker(time.Second / attackRate)
	defer t.Stop()
	for k := 0; ; k++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		h := ids[k%len(ids)]
		var data []byte
		switch k % 3 {
		case 0:
			data = orderMsg(hostileBid(h))
			h.sent = append(h.sent, data)
		case 1:
			// Break the order's envelope: flip a byte near its end (the
			// signature).
			if env := hostileBid(h); env != nil {
				env[len(env)-3] ^= 0xff
				data = orderMsg(env)
			}
		default:
			if len(h.sent) == 0 {
				continue
			}
			data = h.sent[mrand.IntN(len(h.sent))]
		}
		if data != nil {
			h.topic.Publish(ctx, data)
		}
	}
}

// orderMsg is the book message of a sealed order, nil for nil.
func orderMsg(env []byte) []byte {
	if env == nil {
		return nil
	}
	data, err := p2p.MarshalBook(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}})
	if err != nil {
		return nil
	}
	return data
}

// hostileBid is a valid resting bid of h, sealed, unique by its nonce.
func hostileBid(h *hostile) []byte {
	now := time.Now()
	var nonce [8]byte
	rand.Read(nonce[:])
	o := &proto.Order{
		Maker: []byte(h.id), Side: proto.Side_SIDE_BID, Market: Market, Currency: "USD", Quantity: 1,
		PriceMicros: 1000 + int64(nonce[0]), LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600,
		CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(10 * time.Minute).UnixMilli(),
		Nonce: binary.BigEndian.Uint64(nonce[:]),
	}
	env, err := p2p.Seal(h.key, o, proto.MaxBookMessageSize)
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
	actx, stop := context.WithCancel(ctx)
	ids, wait, err := s.startAttack(actx, net, s.cfg.Attack)
	if err != nil {
		stop()
		return err
	}
	defer func() { stop(); wait() }()
	rep.HostileIDs = ids
	s.log.Info("attack: flooding", "identities", ids, "per second", ids/attackKeys*attackRate)
	// Let the flood reach its steady state before measuring.
	time.Sleep(5 * time.Second)
	rng := mrand.New(mrand.NewPCG(9, 10))
	buyers := net.nodes[net.providers:]
	var prop []time.Duration
	for range s.cfg.Samples {
		d, err := s.propagate(ctx, net, buyers[rng.IntN(len(buyers))], rng, time.Minute)
		if err != nil {
			return fmt.Errorf("propagation under attack: %w", err)
		}
		prop = append(prop, d)
	}
	rep.add(Measure{Name: MeasureAttackProp, Stats: statsOf(prop), FloorName: "same run, no attack", Floor: base.Stats.P99, Compare: "p99", Goal: 2,
		Note: fmt.Sprintf("%d hostile identities (%.0f%% of the nodes, %d keys each) flood %d msg/s in all: valid bids, broken signatures, replays", ids, 100*s.cfg.Attack, attackKeys, ids/attackKeys*attackRate)}, false)
	var scratch Report
	scratch.Floors = rep.Floors
	if err := s.trades(ctx, net, &scratch, rng); err != nil {
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
