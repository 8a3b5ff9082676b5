package resale

import (
	"crypto/rand"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	gproto "google.golang.org/protobuf/proto"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// resaleFillSeeds are a resale ask's resell field as the holder of a
// lease bought in a trade carries it (the provider's accept, the holder's
// take) and of one bought by resale (the provider's accept alone).
func resaleFillSeeds(t testing.TB) [][]byte {
	pk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	hk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	pid, _ := peer.IDFromPrivateKey(pk)
	hid, _ := peer.IDFromPrivateKey(hk)
	now := time.Now()
	order := &proto.Order{Maker: []byte(hid), Side: proto.Side_SIDE_BID, Market: "nvidia-h100-sxm5-80gb", Currency: "USD", Quantity: 2,
		PriceMicros: 2_000_000, LeaseType: proto.LeaseType_LEASE_TYPE_RESERVED, DurationS: 60, CreatedUnixMs: now.UnixMilli(),
		ExpiresUnixMs: now.Add(time.Minute).UnixMilli(), Nonce: 1}
	oEnv, err := p2p.Seal(hk, order, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	take := &proto.Take{Taker: []byte(hid), Market: order.Market, MakerOrderId: "ask", TakerOrder: oEnv, Quantity: 2, PriceMicros: 2_000_000,
		Currency: "USD", LeaseType: order.LeaseType, DurationS: 60, CreatedUnixMs: now.UnixMilli()}
	tEnv, err := p2p.Seal(hk, take, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	id := proto.CIDOf(tEnv).String()
	lease := &proto.Lease{Id: id, Provider: []byte(pid), Buyer: []byte(hid), Gpus: []string{"GPU-a", "GPU-b"}, PriceMicros: 2_000_000,
		Currency: "USD", LeaseType: order.LeaseType, DurationS: 60, BillingIntervalS: 1, StartUnixMs: now.UnixMilli(), Market: order.Market}
	aEnv, err := p2p.Seal(pk, &proto.Accept{Maker: []byte(pid), TakeId: id, Lease: lease, CreatedUnixMs: now.UnixMilli()}, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	// The same terms accepted by the holder itself bind no provider.
	forged, err := p2p.Seal(hk, &proto.Accept{Maker: []byte(hid), TakeId: id, Lease: lease, CreatedUnixMs: now.UnixMilli()}, proto.MaxBookMessageSize)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for _, f := range []*proto.Fill{{Take: tEnv, Accept: aEnv}, {Accept: aEnv}, {Take: tEnv, Accept: forged}} {
		b, _ := gproto.Marshal(f)
		out = append(out, b)
	}
	return out
}

func TestResoldLeaseTerms(t *testing.T) {
	seeds := resaleFillSeeds(t)
	for i, want := range []string{"", "", "bad-provider"} {
		l, err := ResoldLeaseTerms(seeds[i], time.Now())
		if got := market.ResaleReason(err); (err == nil) != (want == "") || (err != nil && got != want) {
			t.Errorf("ResoldLeaseTerms(seed %d) = %v, %v; want %q", i, l, err, want)
		}
	}
	if _, err := ResoldLeaseTerms([]byte{0xff, 0x01}, time.Now()); market.ResaleReason(err) != "schema" {
		t.Errorf("ResoldLeaseTerms(garbage) = %v, want schema", err)
	}
}

// FuzzResoldLeaseTerms: any resell bytes are read without a panic, and
// terms read are valid and signed by their provider.
func FuzzResoldLeaseTerms(f *testing.F) {
	for _, s := range resaleFillSeeds(f) {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := ResoldLeaseTerms(b, time.Now())
		if err != nil {
			return
		}
		if market.ValidateTerms(l) != nil {
			t.Fatalf("invalid terms read: %+v", l)
		}
		var fill proto.Fill
		if gproto.Unmarshal(b, &fill) != nil {
			t.Fatal("terms read from bytes that are not a fill")
		}
		_, signer, err := p2p.Open[*proto.Accept](fill.Accept, proto.MaxBookMessageSize)
		if err != nil {
			t.Fatalf("terms read without a valid accept: %v", err)
		}
		if string(signer) != string(l.Provider) {
			if _, err := p2p.OpenFill(&fill, time.Now()); err != nil {
				t.Fatalf("terms read signed by %s, not the provider, without a whole fill", signer)
			}
		}
	})
}
