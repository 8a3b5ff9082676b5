package node

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/suanli/suanli/market"
)

// StatusView is a node at a glance, for `suanli status` and the dashboard.
type StatusView struct {
	ID          string `json:"id"`
	Provider    bool   `json:"provider"`
	NoGPUReason string `json:"no_gpu_reason,omitempty"`
	Peers       int    `json:"peers"`
	// Markets are the markets this node has joined.
	Markets []string `json:"markets"`
	// Offer is the offer this node last published, if any.
	Offer         *PublishedOffer `json:"offer,omitempty"`
	OpenOrders    int             `json:"open_orders"`
	Orders        int             `json:"orders"`
	RunningLeases int             `json:"running_leases"`
	Leases        int             `json:"leases"`
	// Owed is, per currency, what peers owe this node over every
	// countersigned receipt less payments; negative when this node owes.
	Owed []OwedView `json:"owed"`
}

// PublishedOffer is a summary of this node's published offer.
type PublishedOffer struct {
	Seq      uint64    `json:"seq"`
	GPUs     int       `json:"gpus"`
	Price    string    `json:"price"`
	Currency string    `json:"currency"`
	Region   string    `json:"region"`
	Expires  time.Time `json:"expires"`
}

// OwedView is a net amount in one currency.
type OwedView struct {
	Currency   string `json:"currency"`
	Owed       string `json:"owed"`
	OwedMicros int64  `json:"owed_micros"`
}

// Status implements DashboardAPI.
func (n *Node) Status(ctx context.Context) (StatusView, error) {
	id, err := n.ID(ctx)
	if err != nil {
		return StatusView{}, err
	}
	v := StatusView{ID: id.ID, Provider: id.Provider, NoGPUReason: id.NoGPUReason, Peers: len(n.host.Network().Peers()), Markets: []string{}, Owed: []OwedView{}}
	n.books.mu.Lock()
	for mkt := range n.books.topics {
		v.Markets = append(v.Markets, mkt)
	}
	n.books.mu.Unlock()
	slices.Sort(v.Markets)
	if o := n.Published(); o != nil {
		v.Offer = &PublishedOffer{Seq: o.Seq, GPUs: len(o.Gpus), Region: o.Region, Currency: o.GetPricing().GetCurrency(),
			Price:   market.FormatMicros(o.GetPricing().GetOnDemandMicros(), o.GetPricing().GetCurrency()),
			Expires: time.UnixMilli(o.ExpiresUnixMs).UTC()}
	}
	orders, err := n.Orders(ctx)
	if err != nil {
		return StatusView{}, err
	}
	v.Orders = len(orders)
	for _, o := range orders {
		if o.Status == "resting" {
			v.OpenOrders++
		}
	}
	leases, err := n.Leases(ctx)
	if err != nil {
		return StatusView{}, err
	}
	v.Leases = len(leases)
	for _, l := range leases {
		if l.State == "running" {
			v.RunningLeases++
		}
	}
	settle, err := n.Settle(ctx, "")
	if err != nil {
		return StatusView{}, err
	}
	owed := map[string]int64{}
	for _, s := range settle {
		for _, t := range s.Totals {
			owed[t.Currency] += t.OwedMicros
		}
	}
	for cur, micros := range owed {
		v.Owed = append(v.Owed, OwedView{Currency: cur, Owed: market.FormatMicros(micros, cur), OwedMicros: micros})
	}
	slices.SortFunc(v.Owed, func(a, b OwedView) int { return strings.Compare(a.Currency, b.Currency) })
	return v, nil
}

// Status implements DashboardAPI.
func (c *Client) Status(ctx context.Context) (v StatusView, err error) {
	return v, c.get(ctx, "/status", nil, &v)
}

func registerStatusRoute(mux *http.ServeMux, s *apiServer, n *Node) {
	mux.HandleFunc("GET "+apiPrefix+"/status", s.auth(func(r *http.Request) (any, error) { return n.Status(r.Context()) }))
}
