package node

import (
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/internal/lease"
	"github.com/suanli/suanli/node/internal/leases"
	"github.com/suanli/suanli/p2p"
	"github.com/suanli/suanli/proto"
)

// benchCreditNode is a provider-less node holding payments acknowledged
// to one buyer and leases provided to it, running, one receipt each.
func benchCreditNode(b *testing.B, payments, running int) (*Node, peer.ID) {
	b.Helper()
	n, err := New(WithRepo(b.TempDir()), WithAutoInit(), WithoutGPU(), WithAPI(""),
		WithListen("/ip4/127.0.0.1/tcp/0"), WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { n.Close() })
	bk, _, _ := crypto.GenerateEd25519Key(rand.Reader)
	buyer, _ := peer.IDFromPrivateKey(bk)
	start := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	for i := range payments {
		ack := &proto.PaymentAck{Provider: []byte(n.host.ID()), Buyer: []byte(buyer), AmountMicros: 10_000, Currency: "USD",
			Seq: uint64(i + 1), CreatedUnixMs: start.UnixMilli()}
		env, err := p2p.Seal(n.key, ack, proto.MaxReceiptSize)
		if err != nil {
			b.Fatal(err)
		}
		if err := n.putPayment(ack, env); err != nil {
			b.Fatal(err)
		}
	}
	for i := range running {
		terms := &proto.Lease{
			Id: "bench-" + string(rune('a'+i)), Provider: []byte(n.host.ID()), Buyer: []byte(buyer), PriceMicros: 2_400_000, Currency: "USD",
			LeaseType: proto.LeaseType_LEASE_TYPE_SPOT, DurationS: 3600, BillingIntervalS: 60, StartUnixMs: start.UnixMilli(),
			Gpus: []string{"GPU-0", "GPU-1"}, Market: "nvidia-h100-sxm5-80gb",
		}
		ml, err := market.NewLease(terms)
		if err != nil {
			b.Fatal(err)
		}
		ml.Start(start)
		ml.Chain = market.ReceiptState{Seq: 1, WindowEndUnixMs: start.Add(time.Minute).UnixMilli(), GPUMillis: 120_000, Cumulative: 80_000}
		n.leases.Adopt(lease.NewRun(terms, ml, leases.Record{Role: market.RoleProvider}))
	}
	return n, buyer
}

// BenchmarkCreditOf is the credit check a provider's billing step makes
// several times a second per running lease, with 50 acknowledged payments
// and 8 running leases of the buyer: payments read from the store (and
// their signatures verified) every time, the baseline, against the cache.
func BenchmarkCreditOf(b *testing.B) {
	for _, c := range []struct {
		name   string
		cached bool
	}{{"store", false}, {"cached", true}} {
		b.Run(c.name, func(b *testing.B) {
			n, buyer := benchCreditNode(b, 50, 8)
			now := time.Date(2026, 12, 1, 12, 1, 30, 0, time.UTC)
			want := int64(8*(80_000+80_000) - 50*10_000)
			for b.Loop() {
				if !c.cached {
					n.credit.Paid(buyer) // forgets the cached payments
				}
				cr, err := n.credit.Of(buyer, "USD", now, "")
				if err != nil || cr.Unpaid() != want {
					b.Fatalf("Of = %+v (unpaid %d), %v; want unpaid %d", cr, cr.Unpaid(), err, want)
				}
			}
		})
	}
}
