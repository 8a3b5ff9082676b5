package node_test

import (
	"bufio"
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
)

// storeWriteErrors reads suanli_store_write_errors_total{what} from a
// node's /metrics.
func storeWriteErrors(t *testing.T, ctx context.Context, n *node.Node, what string) float64 {
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
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	want := `suanli_store_write_errors_total{what="` + what + `"} `
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), want); ok {
			f, _ := strconv.ParseFloat(v, 64)
			return f
		}
	}
	return 0
}

// TestLeaseStoreWriteFails: a receipt that cannot be stored, on either
// side, ends the lease as failed with the error as its note (counted in
// the metrics), on that side and, told, on the other; it is never
// countersigned nor sent unstored.
func TestLeaseStoreWriteFails(t *testing.T) {
	for _, tt := range []struct {
		name    string
		faulty  func(provider, buyer *node.Node) *node.Node
		wantOth string // the other side's reason
	}{
		// The provider fails storing its next receipt, or a countersigned
		// one whose countersignature arrives just then.
		{"provider", func(p, _ *node.Node) *node.Node { return p }, "failed"},
		{"buyer", func(_, b *node.Node) *node.Node { return b }, "buyer-closed"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			provider, buyer := startLeaseNet(t)
			ctx := marketCtx(t)
			id := trade(t, ctx, provider, buyer, "60s")
			waitFor(t, ctx, "a countersigned receipt on the buyer", func() (bool, string) {
				v, err := buyer.Lease(ctx, id)
				return err == nil && v.Countersigned >= 1, sprint(v, err)
			})
			faulty := tt.faulty(provider, buyer)
			other := provider
			if faulty == provider {
				other = buyer
			}
			injected := errors.New("injected disk failure")
			faulty.FailStoreWrites("receipt/", injected)
			v := waitLeaseClosed(t, ctx, faulty, id)
			if v.Reason != "failed" || !strings.Contains(v.Note, "receipt failed: injected disk failure") {
				t.Errorf("%s's lease = reason %q, note %q; want failed, noting the failed write of a receipt", tt.name, v.Reason, v.Note)
			}
			if got := storeWriteErrors(t, ctx, faulty, "receipt") + storeWriteErrors(t, ctx, faulty, "countersigned receipt"); got < 1 {
				t.Errorf("suanli_store_write_errors_total of receipts = %v, want counted", got)
			}
			ov := waitLeaseClosed(t, ctx, other, id)
			if ov.Reason != tt.wantOth || !strings.Contains(ov.Note, "injected disk failure") {
				t.Errorf("the other side's lease = reason %q, note %q; want %s, told why", ov.Reason, ov.Note, tt.wantOth)
			}
			// Nothing unstored was countersigned: the faulty side's chain
			// (what it stored) covers what the other side holds.
			if faulty == provider && ov.Countersigned > v.Receipts {
				t.Errorf("buyer countersigned %d receipts, the provider stored %d", ov.Countersigned, v.Receipts)
			}
		})
	}
}

// TestTakeRefusedWhenTermsNotStored: a maker that cannot store a lease's
// terms refuses the take before accepting it: no fill, no lease.
func TestTakeRefusedWhenTermsNotStored(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	if _, err := provider.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 2, Price: "2.40", MinDuration: "1s"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "the buyer to see the ask", func() (bool, string) {
		b, err := buyer.Book(ctx, h100, "USD")
		return err == nil && len(b.Asks) == 1, sprint(b, err)
	})
	provider.FailStoreWrites("lease/", errors.New("injected disk failure"))
	bid, err := buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "10s", IOC: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(bid.Fills) != 0 || !strings.Contains(bid.Error, "storing lease") {
		t.Errorf("bid = %+v, want no fill, refused for the unstored terms", bid)
	}
	for _, n := range []*node.Node{provider, buyer} {
		if ls, err := n.Leases(ctx); err != nil || len(ls) != 0 {
			t.Errorf("Leases on %s = %+v, %v; want none", n.Repo(), ls, err)
		}
	}
	if got := storeWriteErrors(t, ctx, provider, "lease terms"); got < 1 {
		t.Errorf(`suanli_store_write_errors_total{what="lease terms"} = %v, want counted`, got)
	}
	provider.FailStoreWrites("", nil)
	bid, err = buyer.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 2, Price: "2.50", Duration: "10s", IOC: true})
	if err != nil || len(bid.Fills) != 1 {
		t.Errorf("bid after the disk recovered = %+v, %v; want filled", bid, err)
	}
}

// TestLeaseFailsOnFullDisk: a provider whose disk is nearly full does not
// crash in Badger (SIGBUS, see internal/store/space.go): the receipt it
// cannot store ends the lease as failed, noting the full disk, and the
// buyer is told. The negative control: with space again, a new lease
// trades and is billed.
func TestLeaseFailsOnFullDisk(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	id := trade(t, ctx, provider, buyer, "60s")
	waitFor(t, ctx, "a countersigned receipt on the buyer", func() (bool, string) {
		v, err := buyer.Lease(ctx, id)
		return err == nil && v.Countersigned >= 1, sprint(v, err)
	})
	provider.SetDiskFree(1 << 20)
	v := waitLeaseClosed(t, ctx, provider, id)
	if v.Reason != "failed" || !strings.Contains(v.Note, "disk nearly full") {
		t.Errorf("provider's lease = reason %q, note %q; want failed, noting the full disk", v.Reason, v.Note)
	}
	bv := waitLeaseClosed(t, ctx, buyer, id)
	if bv.Reason != "failed" || !strings.Contains(bv.Note, "disk nearly full") {
		t.Errorf("buyer's lease = reason %q, note %q; want failed, told why", bv.Reason, bv.Note)
	}
	if bv.Countersigned > v.Receipts {
		t.Errorf("buyer countersigned %d receipts, the provider stored %d", bv.Countersigned, v.Receipts)
	}
	provider.SetDiskFree(0)
	id2 := trade(t, ctx, provider, buyer, "3s")
	waitFor(t, ctx, "the new lease billed and countersigned", func() (bool, string) {
		v, err := buyer.Lease(ctx, id2)
		return err == nil && v.Countersigned >= 1, sprint(v, err)
	})
}
