package node

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
)

// Status implements DashboardAPI.
func (n *Node) Status(ctx context.Context) (_ api.StatusView, err error) {
	defer classified(&err)
	id, err := n.ID(ctx)
	if err != nil {
		return api.StatusView{}, err
	}
	v := api.StatusView{ID: id.ID, Provider: id.Provider, NoGPUReason: id.NoGPUReason, Peers: len(n.host.Network().Peers()), Markets: []string{}, Owed: []api.OwedView{}}
	v.Markets = append(v.Markets, n.books.Markets()...)
	if n.IsProvider() {
		v.Isolation = n.isolation
	}
	if o := n.Published(); o != nil {
		v.Offer = &api.PublishedOffer{Seq: o.Seq, GPUs: len(o.Gpus), Region: o.Region, Currency: o.GetPricing().GetCurrency(),
			Price:   market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
			Expires: time.UnixMilli(o.ExpiresUnixMs).UTC()}
	}
	orders, err := n.Orders(ctx)
	if err != nil {
		return api.StatusView{}, err
	}
	v.Orders = len(orders)
	for _, o := range orders {
		if o.Status == "resting" {
			v.OpenOrders++
		}
	}
	leases, err := n.Leases(ctx)
	if err != nil {
		return api.StatusView{}, err
	}
	v.Leases = len(leases)
	for _, l := range leases {
		if l.State == "running" {
			v.RunningLeases++
		}
	}
	settle, err := n.Settle(ctx, "")
	if err != nil {
		return api.StatusView{}, err
	}
	owed := map[string]int64{}
	for _, s := range settle {
		for _, t := range s.Totals {
			owed[t.Currency] += t.OwedMicros
		}
	}
	for cur, micros := range owed {
		v.Owed = append(v.Owed, api.OwedView{Currency: cur, Owed: market.FormatMicros(micros, cur), OwedMicros: micros})
	}
	slices.SortFunc(v.Owed, func(a, b api.OwedView) int { return strings.Compare(a.Currency, b.Currency) })
	return v, nil
}
