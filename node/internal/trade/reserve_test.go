package trade

import (
	"context"
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/exchange"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

const mkt = "nvidia-h100-sxm5-80gb"

// fakeNode is a provider with GPUs g1 and g2 and no leases; checkCredit,
// when set, is its credit check.
type fakeNode struct {
	Node        // any other method panics: the tests below must not reach it
	st          *store.Store
	checkCredit func(l *proto.Lease) error
}

func (f *fakeNode) FreeGPUs(string) ([]string, error) {
	busy, err := f.st.ReservedGPUs(time.Now())
	if err != nil {
		return nil, err
	}
	var free []string
	for _, g := range []string{"g1", "g2"} {
		if !busy[g] {
			free = append(free, g)
		}
	}
	return free, nil
}
func (f *fakeNode) LeaseStart(_ *market.Order, now time.Time) time.Time { return now }
func (f *fakeNode) Preemptible(string) []market.Preemptible             { return nil }
func (f *fakeNode) CheckCredit(l *proto.Lease, _ time.Time) error {
	if f.checkCredit != nil {
		return f.checkCredit(l)
	}
	return nil
}

// newMaker is a Trader with a real store and books, and a resting ask of
// 2 GPUs of its own.
func newMaker(t *testing.T) (*Trader, *fakeNode, market.Order) {
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
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	f := &fakeNode{st: st}
	books := exchange.New(exchange.Config{})
	tr := New(Config{Host: h, Key: key, Store: st, Books: books, Inflight: &Inflight{}, Now: time.Now,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Node: f, BillingInterval: time.Second})
	now := time.Now()
	ask := market.Order{ID: "ask", Maker: h.ID().String(), Side: market.Ask, Market: mkt, Currency: "USD", Quantity: 2, Price: 1_000_000,
		LeaseType: market.Spot, MinDuration: time.Second, MaxDuration: time.Hour, Created: now, Expires: now.Add(time.Hour)}
	if err := books.With(mkt, "USD", func(s *exchange.Replica) {
		if err := s.Book.Add(&ask, now); err != nil {
			t.Fatal(err)
		}
	}); err != nil {
		t.Fatal(err)
	}
	return tr, f, ask
}

// reserve runs reserveTake for a take of 1 GPU of the ask, as answerTake
// does.
func reserve(tr *Trader, ask market.Order, takeID string) (*proto.Lease, string) {
	now := time.Now()
	bid := market.Order{ID: "bid-" + takeID, Maker: "12D3KooWtaker", Side: market.Bid, Market: mkt, Currency: "USD", Quantity: 1,
		Price: ask.Price, LeaseType: market.Spot, Duration: time.Minute, Created: now, Expires: now.Add(time.Hour), TimeInForce: market.IOC}
	take := &proto.Take{Taker: []byte("taker"), Market: mkt, MakerOrderId: ask.ID, Quantity: 1, PriceMicros: ask.Price,
		Currency: "USD", LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 60}
	lookup := func() (market.Order, uint32, uint32, error) {
		mine, rem, _ := tr.Books.Lookup(mkt, "USD", ask.ID)
		return mine, rem, tr.Inflight.Of(ask.ID), nil
	}
	l, _, _, rej := tr.reserveTake(take, takeID, &bid, market.Facts{}, lookup, nil, now)
	return l, rej
}

// TestReserveTakeOutsideTheLock: the maker's credit check (a scan of
// payment acks with signature checks) and the hold of the GPUs run
// without the trade lock, and still no GPU or quantity is sold twice: a
// second take while the first is in its credit check gets the other GPU,
// a third finds the order taken, and a take refused on credit leaves
// nothing held or counted. Before, reserveTake held the trade lock across
// both.
func TestReserveTakeOutsideTheLock(t *testing.T) {
	tr, f, ask := newMaker(t)
	inCredit, goOn := make(chan struct{}), make(chan struct{})
	var calls sync.Mutex
	first := true
	f.checkCredit = func(*proto.Lease) error {
		calls.Lock()
		wait := first
		first = false
		calls.Unlock()
		locked := !tr.mu.TryLock()
		if locked {
			t.Error("the credit check ran under the trade lock")
		} else {
			tr.mu.Unlock()
		}
		if wait {
			close(inCredit)
			if !locked { // under the lock, waiting would deadlock the test
				<-goOn
			}
		}
		return nil
	}
	type result struct {
		l   *proto.Lease
		rej string
	}
	tr.Store.FailWrites(func([]byte) error { // the synced hold of the GPUs
		if !tr.mu.TryLock() {
			t.Error("the GPUs were held in the store under the trade lock")
		} else {
			tr.mu.Unlock()
		}
		return nil
	})
	done := make(chan result)
	go func() {
		l, rej := reserve(tr, ask, "take-1")
		done <- result{l, rej}
	}()
	<-inCredit
	l2, rej := reserve(tr, ask, "take-2")
	if rej != "" {
		t.Fatalf("a second take while the first checks credit: refused %q", rej)
	}
	close(goOn)
	r1 := <-done
	if r1.rej != "" {
		t.Fatalf("the first take: refused %q", r1.rej)
	}
	if slices.Equal(r1.l.Gpus, l2.Gpus) || len(r1.l.Gpus) != 1 || len(l2.Gpus) != 1 {
		t.Fatalf("the two takes got GPUs %v and %v, want one each, not the same", r1.l.Gpus, l2.Gpus)
	}
	held, err := tr.Store.GPUHolds(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if held[r1.l.Gpus[0]].Lease != "take-1" || held[l2.Gpus[0]].Lease != "take-2" {
		t.Fatalf("store holds %v, want each GPU held by its take", held)
	}
	if _, rej := reserve(tr, ask, "take-3"); !strings.Contains(rej, "0 GPUs left") && !strings.Contains(rej, "being taken") {
		t.Fatalf("a third take of a 2-GPU order with 2 in flight: %q, want refused on quantity", rej)
	}

	// Refused on credit: nothing held or counted, no GPU left chosen.
	tr2, f2, ask2 := newMaker(t)
	f2.checkCredit = func(*proto.Lease) error { return errors.New("buyer over its credit limit") }
	if _, rej := reserve(tr2, ask2, "take-x"); !strings.Contains(rej, "credit") {
		t.Fatalf("refused %q, want on credit", rej)
	}
	held, _ = tr2.Store.GPUHolds(time.Now())
	if len(held) != 0 || tr2.Inflight.Of(ask2.ID) != 0 || len(tr2.choosing) != 0 {
		t.Fatalf("after a refusal: held %v, in flight %d, choosing %v; want nothing", held, tr2.Inflight.Of(ask2.ID), tr2.choosing)
	}
	// The negative control: with credit, the same take is reserved.
	f2.checkCredit = nil
	if l, rej := reserve(tr2, ask2, "take-y"); rej != "" || len(l.Gpus) != 1 {
		t.Fatalf("with credit: %v, %q; want reserved", l, rej)
	}
}

// TestStoredAnswerAfterRestart: a take answered before a restart (an
// accept, or a resale's reply stored with the sale) is answered from the
// store, the same bytes, by a Trader that never saw it.
func TestStoredAnswerAfterRestart(t *testing.T) {
	tr, _, _ := newMaker(t)
	from, env := signedTake(t, &proto.Take{Market: mkt, MakerOrderId: "resale-ask", Quantity: 1, PriceMicros: 1, Currency: "USD",
		CreatedUnixMs: time.Now().UnixMilli()})
	takeID := proto.CIDOf(env).String()
	reply := &proto.TradeReply{Body: &proto.TradeReply_Resale{Resale: &proto.ResaleReply{Accept: []byte("a"), Handover: []byte("h"), Premium: []byte("p")}}}
	raw, _ := gproto.Marshal(reply)
	if err := tr.Store.PutResoldTake("resale/sold/lease", &proto.SignedPremium{Premium: []byte("p")}, takeID, raw); err != nil {
		t.Fatal(err)
	}
	if err := tr.Store.PutResoldTake("resale/sold/lease", &proto.SignedPremium{Premium: []byte("p")}, takeID, raw); !errors.Is(err, store.ErrAnswered) {
		t.Fatalf("a second answer to the take stored: %v, want ErrAnswered", err)
	}
	for i := range 2 {
		got := tr.HandleTake(context.Background(), from, env)
		if !gproto.Equal(got, reply) {
			t.Fatalf("answer %d = %v, want the stored resale reply", i, got)
		}
	}
}
