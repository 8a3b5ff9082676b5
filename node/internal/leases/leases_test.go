package leases

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/store"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

func openStore(t *testing.T) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

func key(t *testing.T) (crypto.PrivKey, peer.ID) {
	t.Helper()
	k, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return k, id
}

// A record as the node stored it before the record moved here decodes
// field for field: records on disk outlive the code that wrote them.
func TestRecordStoredByEarlierVersions(t *testing.T) {
	st := openStore(t)
	old := `{"role":"provider","state":"running","reason":"","started_at":"2026-11-30T10:00:00Z","ending_at":"2026-11-30T12:00:00Z",` +
		`"closed_at":"0001-01-01T00:00:00Z","executor":"docker","workload":{"image":"suanli/app:1","ports":[8080]},"handle":"ctr-1",` +
		`"held_since_ms":1764496800000,"note":"n","peer_addrs":["/ip4/127.0.0.1/tcp/4001"],"bid_id":"bid-1"}`
	if err := st.PutLeaseRecord("lease-1", []byte(old)); err != nil {
		t.Fatal(err)
	}
	recs, err := Records(st)
	if err != nil {
		t.Fatal(err)
	}
	r := recs["lease-1"]
	switch {
	case r.Role != market.RoleProvider, r.State != market.LeaseRunning, r.Executor != "docker", r.Handle != "ctr-1":
		t.Fatalf("decoded %+v", r)
	case r.Workload == nil || r.Workload.Image != "suanli/app:1" || len(r.Workload.Ports) != 1:
		t.Fatalf("workload %+v", r.Workload)
	case !r.EndingAt.Equal(time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)), r.HeldSince != 1764496800000, r.BidID != "bid-1", len(r.PeerAddrs) != 1:
		t.Fatalf("decoded %+v", r)
	}
	// Written back, it reads the same, and a buyer's role survives too.
	r.Role = market.RoleBuyer
	if err := PutRecord(st, "lease-1", &r); err != nil {
		t.Fatal(err)
	}
	if recs, err = Records(st); err != nil || recs["lease-1"].Role != market.RoleBuyer || recs["lease-1"].Handle != "ctr-1" {
		t.Fatalf("after a round trip: %+v, %v", recs["lease-1"], err)
	}
	if err := st.PutLeaseRecord("lease-2", []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := Records(st); err == nil || !strings.Contains(err.Error(), "lease-2") {
		t.Fatalf("a corrupt record: %v, want an error naming it", err)
	}
}

func TestTakePayment(t *testing.T) {
	pk, provider := key(t)
	_, buyer := key(t)
	_, stranger := key(t)
	st := openStore(t)
	ack, err := NewPayment(st, provider, buyer, market.Money{Micros: 5_000_000, Currency: "USD"}, "inv-1", time.Now())
	if err != nil || ack.Seq != 1 {
		t.Fatalf("first payment: %+v, %v", ack, err)
	}
	env, err := p2p.Seal(pk, ack, proto.MaxReceiptSize)
	if err != nil {
		t.Fatal(err)
	}
	if err := TakePayment(st, buyer, stranger, env); !errors.Is(err, market.ErrPayment) {
		t.Fatalf("relayed by a stranger: %v, want ErrPayment", err)
	}
	if err := TakePayment(st, stranger, provider, env); !errors.Is(err, market.ErrPayment) {
		t.Fatalf("taken by someone it is not for: %v, want ErrPayment", err)
	}
	if err := TakePayment(st, buyer, provider, env[:len(env)-1]); err == nil {
		t.Fatal("a truncated envelope was taken")
	}
	if err := TakePayment(st, buyer, provider, env); err != nil {
		t.Fatal(err)
	}
	l, err := Ledger(buyer, st)
	if err != nil {
		t.Fatal(err)
	}
	if peers := l.Peers(); len(peers) != 1 || peers[0] != string(provider) {
		t.Fatalf("ledger peers %v, want the provider", peers)
	}
	if next, err := NewPayment(st, provider, buyer, market.Money{Micros: 1, Currency: "USD"}, "", time.Now()); err != nil || next.Seq != 2 {
		t.Fatalf("next payment: %+v, %v; want seq 2", next, err)
	}
}

func TestVerifyExportRefuses(t *testing.T) {
	pk, provider := key(t)
	bk, buyer := key(t)
	ok, other := key(t)
	terms := &proto.Lease{Id: "lease-1", Provider: []byte(provider), Buyer: []byte(buyer), Currency: "USD"}
	accept := func(k crypto.PrivKey, maker peer.ID) []byte {
		env, err := p2p.Seal(k, &proto.Accept{Maker: []byte(maker), TakeId: "take", Lease: terms, CreatedUnixMs: 1}, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatal(err)
		}
		return env
	}
	receipt := func(k crypto.PrivKey) *proto.SignedReceipt {
		env, err := p2p.Seal(k, &proto.Receipt{LeaseId: "lease-1", Provider: []byte(provider), Seq: 1}, proto.MaxReceiptSize)
		if err != nil {
			t.Fatal(err)
		}
		return &proto.SignedReceipt{Receipt: env}
	}
	export := func(lease []byte, chain ...*proto.SignedReceipt) []byte {
		b, err := gproto.Marshal(&proto.ReceiptChain{Lease: lease, Receipts: chain})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := VerifyExport([]byte("not a chain")); err == nil {
		t.Error("garbage verified")
	}
	if _, err := VerifyExport(export(accept(ok, other))); err == nil {
		t.Error("terms signed by a third party verified")
	}
	rep, err := VerifyExport(export(accept(pk, provider), receipt(bk)))
	if err != nil || rep.Valid || !strings.Contains(rep.Error, "not the provider") {
		t.Errorf("a receipt signed by the buyer: %+v, %v", rep, err)
	}
	if _, err := Export([]byte("no fill"), nil); err == nil {
		t.Error("Export without signed terms succeeded")
	}
}
