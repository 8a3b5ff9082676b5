package node_test

import (
	"testing"

	"github.com/suanli/suanli/node/api"
)

// TestSettleExactAmount: what Settle shows as owed, to the micro-unit, is
// what the provider can acknowledge, and both ledgers then owe nothing.
func TestSettleExactAmount(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "3s")
	waitLeaseClosed(t, ctx, provider, id)
	waitLeaseClosed(t, ctx, buyer, id)
	var owed api.TotalView
	waitFor(t, ctx, "both ledgers to agree on what is owed", func() (bool, string) {
		p, err1 := provider.Settle(ctx, buyer.PeerID().String())
		b, err2 := buyer.Settle(ctx, provider.PeerID().String())
		if err1 != nil || err2 != nil || len(p) != 1 || len(b) != 1 || len(p[0].Totals) != 1 || len(b[0].Totals) != 1 {
			return false, sprint(p, b, err1, err2)
		}
		owed = p[0].Totals[0]
		return owed.OwedMicros > 0 && b[0].Totals[0].OwedMicros == -owed.OwedMicros, sprint(p, b)
	})
	if owed.OwedMicros%10_000 == 0 {
		t.Logf("owed %s %s is whole cents: the test shows less than it could", owed.Owed, owed.Currency)
	}
	if _, err := provider.AckPayment(ctx, api.PaymentRequest{Peer: buyer.PeerID().String(), Amount: owed.Owed, Currency: owed.Currency}); err != nil {
		t.Fatalf("AckPayment(%s %s, exactly what is owed) = %v", owed.Owed, owed.Currency, err)
	}
	waitFor(t, ctx, "both ledgers at 0", func() (bool, string) {
		p, err1 := provider.Settle(ctx, buyer.PeerID().String())
		b, err2 := buyer.Settle(ctx, provider.PeerID().String())
		return err1 == nil && err2 == nil && len(p) == 1 && len(b) == 1 &&
			p[0].Totals[0].OwedMicros == 0 && b[0].Totals[0].OwedMicros == 0, sprint(p, b, err1, err2)
	})
}
