package node_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// hostile is a raw libp2p host with its own gossipsub, outside any node,
// joined to one market topic and connected to a target node.
type hostile struct {
	key   crypto.PrivKey
	id    peer.ID
	topic *pubsub.Topic
}

// newHostile starts a raw host, connects it to target and waits until the
// target is in the host's view of the market topic (so a publication
// reaches it: gossipsub flood-publishes to every topic peer).
func newHostile(t *testing.T, ctx context.Context, target *node.Node, mkt string) *hostile {
	t.Helper()
	key, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	h, err := p2p.NewHost(p2p.HostConfig{Key: key, Listen: []string{"/ip4/127.0.0.1/tcp/0"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	psCtx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ps, err := p2p.NewPubSub(psCtx, h)
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(p2p.BookTopic(mkt))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topic.Close() })
	if err := h.Connect(ctx, peer.AddrInfo{ID: target.PeerID(), Addrs: target.Host().Addrs()}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the target node in the hostile host's topic", func() (bool, string) {
		peers := topic.ListPeers()
		for _, p := range peers {
			if p == target.PeerID() {
				return true, ""
			}
		}
		return false, sprint(peers)
	})
	return &hostile{key: key, id: h.ID(), topic: topic}
}

// hostileBid is a well-formed bid of maker for mkt at price (micro-units).
func hostileBid(maker peer.ID, mkt string, price int64) *proto.Order {
	now := time.Now()
	var nonce [8]byte
	rand.Read(nonce[:])
	return &proto.Order{
		Maker: []byte(maker), Side: proto.Side_SIDE_BID, Market: mkt, Currency: "USD",
		Quantity: 1, PriceMicros: price, LeaseType: proto.LeaseType_LEASE_TYPE_SPOT,
		DurationS: 3600, CreatedUnixMs: now.UnixMilli(), ExpiresUnixMs: now.Add(time.Hour).UnixMilli(),
		Nonce: binary.BigEndian.Uint64(nonce[:]),
	}
}

// orderMessage seals o with key and wraps it as a book message.
func orderMessage(t *testing.T, key crypto.PrivKey, o *proto.Order) []byte {
	t.Helper()
	env, err := p2p.Seal(key, o, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	data, err := p2p.MarshalBook(&proto.BookMessage{Body: &proto.BookMessage_Order{Order: env}})
	if err != nil {
		t.Fatal(err)
	}
	return data
}

// bookRejects reads suanli_validation_rejects_total{kind="book"} by reason
// from a node's /metrics (open, no token).
func bookRejects(t *testing.T, ctx context.Context, n *node.Node) map[string]float64 {
	t.Helper()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.APIAddr()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "suanli_validation_rejects_total{") || !strings.Contains(line, `kind="book"`) {
			continue
		}
		_, rest, _ := strings.Cut(line, `reason="`)
		reason, _, _ := strings.Cut(rest, `"`)
		fields := strings.Fields(line)
		v, err := strconv.ParseFloat(fields[len(fields)-1], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		out[reason] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestHostileGossip: a raw libp2p peer publishes garbage, an order signed
// by one key naming another maker, and an order for another market on a
// node's book topic. The node's validator rejects each, counting the reason
// in /metrics, and none of them reaches its book (an order well signed by
// its maker but published by another peer included: a publisher cannot
// speak for keys it makes up); a well-formed bid from a
// raw peer is accepted (so the test can tell a deaf node from a careful one).
//
// Each hostile message comes from its own fresh peer: gossipsub scoring
// graylists a peer after two rejected messages (-100 × count², graylist
// below -300), after which the node drops its traffic unvalidated.
func TestHostileGossip(t *testing.T) {
	net := startNet(t, 1, 1) // a lone provider cannot publish its offer
	ctx := marketCtx(t)
	target := net.Buyers[0]
	const other = "nvidia-a100-sxm4-40gb"
	if _, err := target.Book(ctx, h100, "USD"); err != nil { // joins the market topic
		t.Fatal(err)
	}
	if target.APIAddr() == "" {
		t.Fatal("devnet node has no API")
	}
	before := bookRejects(t, ctx, target)

	// The reason labels, from the p2p package's own classification.
	_, schemaErr := p2p.DecodeBook([]byte{0xff, 0xff, 0xff, 0xff}, h100, time.Now())
	reasonSchema := p2p.BookReason(schemaErr)
	keyB, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	idB, _ := peer.IDFromPrivateKey(keyB)

	cases := []struct {
		name   string
		reason string
		data   func(h *hostile) []byte
	}{
		{"not a book message", reasonSchema, func(*hostile) []byte { return []byte{0xff, 0xff, 0xff, 0xff} }},
		{"sealed by A, naming maker B", "wrong-signer", func(h *hostile) []byte {
			return orderMessage(t, h.key, hostileBid(idB, h100, 1_110_000))
		}},
		{"sealed by B, naming maker B, published by A", "not-author", func(*hostile) []byte {
			return orderMessage(t, keyB, hostileBid(idB, h100, 1_150_000))
		}},
		{"order for another market", "wrong-topic", func(h *hostile) []byte {
			return orderMessage(t, h.key, hostileBid(h.id, other, 1_220_000))
		}},
	}
	if reasonSchema != "schema" {
		t.Errorf("garbage is classified %q, want schema", reasonSchema)
	}
	for _, c := range cases {
		h := newHostile(t, ctx, target, h100)
		data := c.data(h)
		// The node's validator must see it exactly as the label says.
		if ev, err := p2p.DecodeBook(data, h100, time.Now()); c.reason == "not-author" {
			if err != nil || exchange.AuthoredBy(ev, h.id) {
				t.Fatalf("%s: DecodeBook gives %v, authored by the publisher: %v", c.name, err, err == nil && exchange.AuthoredBy(ev, h.id))
			}
		} else if p2p.BookReason(err) != c.reason {
			t.Fatalf("%s: DecodeBook gives %v (%q), want reason %q", c.name, err, p2p.BookReason(err), c.reason)
		}
		if err := h.topic.Publish(ctx, data); err != nil {
			t.Fatalf("%s: publish: %v", c.name, err)
		}
		waitFor(t, ctx, fmt.Sprintf("%s: rejects{reason=%q} to increase", c.name, c.reason), func() (bool, string) {
			now := bookRejects(t, ctx, target)
			return now[c.reason] >= before[c.reason]+1, sprint(before, now)
		})
	}

	// A well-formed bid from a raw peer is accepted into the book.
	good := newHostile(t, ctx, target, h100)
	if err := good.topic.Publish(ctx, orderMessage(t, good.key, hostileBid(good.id, h100, 1_330_000))); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the well-formed bid in the node's book", func() (bool, string) {
		b, err := target.Book(ctx, h100, "USD")
		return err == nil && len(b.Bids) == 1 && b.Bids[0].Price == "1.33", sprint(b, err)
	})
	b, err := target.Book(ctx, h100, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if len(b.Bids) != 1 || b.Bids[0].Orders != 1 || len(b.Asks) != 0 {
		t.Errorf("book = %+v, want only the well-formed bid", b)
	}
	ob, err := target.Book(ctx, other, "USD")
	if err != nil {
		t.Fatal(err)
	}
	if len(ob.Bids) != 0 || len(ob.Asks) != 0 {
		t.Errorf("%s book = %+v, want empty: the order came on the wrong topic", other, ob)
	}
	after := bookRejects(t, ctx, target)
	for _, c := range cases {
		if after[c.reason] != before[c.reason]+1 {
			t.Errorf("rejects{reason=%q}: %v before, %v after, want one more", c.reason, before[c.reason], after[c.reason])
		}
	}
}
