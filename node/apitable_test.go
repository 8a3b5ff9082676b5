package node_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/suanli/suanli/node"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// apiCase is one call of an API method. The same case runs in-process and
// through the daemon's HTTP API: either both fail with want (the same
// code and message), or both succeed with the same answer (as JSON, after
// project keeps what is stable from one call to the next).
type apiCase struct {
	method  string // the api.API method the case calls
	name    string
	call    func(ctx context.Context, provider, buyer api.API) (any, error)
	want    error             // the sentinel both must match; nil: success
	project func(v any) any   // nil: the whole answer
	check   func(v any) error // optional: what the answer must hold
}

// TestAPITable runs every method of api.API through both implementations:
// the in-process Node and a client.Client of its daemon. It fails when a
// method has no case, so a new method must come with one.
func TestAPITable(t *testing.T) {
	provider, buyer := startLeaseNet(t)
	ctx := marketCtx(t)
	lease := trade(t, ctx, provider, buyer, "2s")
	waitLeaseClosed(t, ctx, provider, lease)
	waitLeaseClosed(t, ctx, buyer, lease)
	waitFor(t, ctx, "the last receipt countersigned", func() (bool, string) {
		v, err := buyer.Lease(ctx, lease)
		return err == nil && v.Receipts > 0 && v.Countersigned == v.Receipts, sprint(v, err)
	})
	orders, err := buyer.Orders(ctx)
	if err != nil || len(orders) != 1 {
		t.Fatalf("buyer orders = %+v, %v", orders, err)
	}
	bid := orders[0].ID
	pid := provider.PeerID().String()

	viaClient := func(n *node.Node) api.API {
		c, err := client.Open(n.Repo())
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	sameSet := func(key func(any) []string) func(any) any {
		return func(v any) any { s := key(v); slices.Sort(s); return s }
	}
	cases := []apiCase{
		{method: "ID", name: "provider", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.ID(ctx) }},
		{method: "GPUs", name: "provider", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.GPUs(ctx) },
			project: func(v any) any {
				r := v.(api.GPUReport)
				for i := range r.GPUs {
					r.GPUs[i].Telemetry = nil // a fresh sample each call
				}
				return r
			}},
		{method: "GPUs", name: "buyer has none", call: func(ctx context.Context, _, b api.API) (any, error) { return b.GPUs(ctx) }, want: api.ErrNoGPUs},
		{method: "Offers", name: "h100", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.Offers(ctx, api.OfferQuery{GPU: "h100"})
		}},
		{method: "Offers", name: "bad price", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.Offers(ctx, api.OfferQuery{MaxPrice: "abc"})
		}, want: api.ErrBadRequest},
		{method: "Peers", name: "buyer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Peers(ctx) },
			project: sameSet(func(v any) []string {
				var ids []string
				for _, p := range v.([]api.PeerView) {
					ids = append(ids, p.ID)
				}
				return ids
			}),
			check: func(v any) error {
				for _, p := range v.([]api.PeerView) {
					if p.ID == pid {
						return nil
					}
				}
				return errors.New("the provider is not among the buyer's peers")
			}},
		{method: "PlaceOrder", name: "bad price", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.PlaceOrder(ctx, api.OrderRequest{Side: "bid", Market: h100, Count: 1, Price: "abc", Duration: "1m"})
		}, want: api.ErrBadRequest},
		{method: "Order", name: "the bid", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Order(ctx, bid) }},
		{method: "Order", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Order(ctx, "bafynope") }, want: api.ErrUnknownOrder},
		{method: "Orders", name: "buyer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Orders(ctx) }},
		{method: "CancelOrder", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.CancelOrder(ctx, "bafynope")
		}, want: api.ErrUnknownOrder},
		{method: "Book", name: "h100", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Book(ctx, h100, "USD") }},
		{method: "Book", name: "bad currency", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Book(ctx, h100, "usd") }, want: api.ErrBadRequest},
		{method: "Trades", name: "h100", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Trades(ctx, h100) },
			check: func(v any) error {
				if ts := v.([]api.TradeView); len(ts) != 1 || ts[0].Lease != lease {
					return errors.New("want the one trade of the lease")
				}
				return nil
			}},
		{method: "Attest", name: "provider", call: func(ctx context.Context, _, b api.API) (any, error) {
			r, err := b.Attest(ctx, pid)
			return []any{r.Provider, r.Verified, len(r.GPUs)}, err
		}},
		{method: "Attest", name: "not a peer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Attest(ctx, "not-a-peer") }, want: api.ErrBadRequest},
		{method: "Leases", name: "buyer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Leases(ctx) }},
		{method: "Lease", name: "closed", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Lease(ctx, lease) },
			check: func(v any) error {
				if l := v.(api.LeaseView); l.State != "closed" || l.Reason != "completed" {
					return errors.New("want closed, completed")
				}
				return nil
			}},
		{method: "Lease", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Lease(ctx, "nope") }, want: api.ErrUnknownLease},
		{method: "CloseLease", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.CloseLease(ctx, "nope") }, want: api.ErrUnknownLease},
		{method: "CloseLease", name: "already closed", call: func(ctx context.Context, _, b api.API) (any, error) { return b.CloseLease(ctx, lease) }, want: api.ErrLeaseState},
		{method: "Logs", name: "closed lease", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Logs(ctx, lease, 0) }},
		{method: "Logs", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Logs(ctx, "nope", 0) }, want: api.ErrUnknownLease},
		{method: "Receipts", name: "lease", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Receipts(ctx, lease) }},
		{method: "Receipts", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Receipts(ctx, "nope") }, want: api.ErrUnknownLease},
		{method: "VerifyReceipts", name: "lease", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.VerifyReceipts(ctx, lease) }},
		{method: "VerifyReceipts", name: "unknown", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.VerifyReceipts(ctx, "nope") }, want: api.ErrUnknownLease},
		{method: "ExportReceipts", name: "lease", call: func(ctx context.Context, _, b api.API) (any, error) { return b.ExportReceipts(ctx, lease) }},
		{method: "ExportReceipts", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) { return b.ExportReceipts(ctx, "nope") }, want: api.ErrUnknownLease},
		{method: "Settle", name: "all", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.Settle(ctx, "") }},
		{method: "Settle", name: "not a peer", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.Settle(ctx, "not-a-peer") }, want: api.ErrBadRequest},
		{method: "AckPayment", name: "bad amount", call: func(ctx context.Context, p, _ api.API) (any, error) {
			return p.AckPayment(ctx, api.PaymentRequest{Peer: buyer.PeerID().String(), Amount: "-x", Currency: "USD"})
		}, want: api.ErrBadRequest},
		{method: "Evidence", name: "none", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Evidence(ctx, "") }},
		{method: "Evidence", name: "not a peer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Evidence(ctx, "not-a-peer") }, want: api.ErrBadRequest},
		{method: "ExportEvidence", name: "unknown", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.ExportEvidence(ctx, "fill/none")
		}, want: api.ErrUnknownEvidence},
		{method: "History", name: "h100", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.History(ctx, h100, "USD", api.HistoryQuery{})
		}},
		{method: "History", name: "bad currency", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.History(ctx, h100, "XXX", api.HistoryQuery{})
		}, want: api.ErrBadRequest},
		{method: "GPUHistory", name: "provider", call: func(ctx context.Context, p, _ api.API) (any, error) { return p.GPUHistory(ctx) },
			project: sameSet(func(v any) []string {
				var ids []string
				for _, g := range v.(api.GPUHistoryView).GPUs {
					ids = append(ids, g.UUID)
				}
				return ids
			})},
		{method: "GPUHistory", name: "buyer has none", call: func(ctx context.Context, _, b api.API) (any, error) { return b.GPUHistory(ctx) }, want: api.ErrNoGPUs},
		{method: "OrdersPage", name: "all", call: func(ctx context.Context, _, b api.API) (any, error) { return b.OrdersPage(ctx, api.PageQuery{}) }},
		{method: "OrdersPage", name: "bad status", call: func(ctx context.Context, _, b api.API) (any, error) {
			return b.OrdersPage(ctx, api.PageQuery{Status: "lost"})
		}, want: api.ErrBadRequest},
		{method: "Markets", name: "buyer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Markets(ctx) }},
		{method: "Status", name: "buyer", call: func(ctx context.Context, _, b api.API) (any, error) { return b.Status(ctx) },
			project: func(v any) any { s := v.(api.StatusView); s.Peers = 0; return s }},
		{method: "PlaceOrder", name: "post-only ask", call: func(ctx context.Context, p, _ api.API) (any, error) {
			o, err := p.PlaceOrder(ctx, api.OrderRequest{Side: "ask", Market: h100, Count: 1, Price: "9.00", MinDuration: "1s", PostOnly: true})
			if err != nil {
				return nil, err
			}
			// Withdraw it at once: the next implementation places its own.
			// Last in the table: other nodes' books see it for a moment.
			c, err := p.CancelOrder(ctx, o.ID)
			if err != nil {
				return nil, err
			}
			return []string{o.Status, c.Status, o.Price}, nil
		}},
	}

	covered := map[string]bool{}
	for _, c := range cases {
		covered[c.method] = true
	}
	it := reflect.TypeFor[api.API]()
	for i := range it.NumMethod() {
		if m := it.Method(i).Name; !covered[m] {
			t.Errorf("api.API.%s has no case in TestAPITable", m)
		}
	}

	impls := []struct {
		name            string
		provider, buyer api.API
	}{
		{"in-process", provider, buyer},
		{"http", viaClient(provider), viaClient(buyer)},
	}
	for _, c := range cases {
		t.Run(c.method+"/"+c.name, func(t *testing.T) {
			var answers [2]string
			var errs [2]error
			for i, impl := range impls {
				v, err := c.call(ctx, impl.provider, impl.buyer)
				errs[i] = err
				if c.want != nil {
					if !errors.Is(err, c.want) {
						t.Fatalf("%s: error %v (code %q), want %v", impl.name, err, api.CodeOf(err), c.want)
					}
					continue
				}
				if err != nil {
					t.Fatalf("%s: %v", impl.name, err)
				}
				if c.check != nil {
					if err := c.check(v); err != nil {
						t.Fatalf("%s: %+v: %v", impl.name, v, err)
					}
				}
				if c.project != nil {
					v = c.project(v)
				}
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				answers[i] = string(b)
			}
			if c.want != nil {
				if errs[0].Error() != errs[1].Error() || api.CodeOf(errs[0]) != api.CodeOf(errs[1]) {
					t.Errorf("errors differ:\n in-process %q (%s)\n http       %q (%s)", errs[0], api.CodeOf(errs[0]), errs[1], api.CodeOf(errs[1]))
				}
				return
			}
			if answers[0] != answers[1] {
				t.Errorf("answers differ:\n in-process %s\n http       %s", answers[0], answers[1])
			}
		})
	}
}
