package node

import (
	"context"

	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/internal/view"
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
	orders, err := n.Orders(ctx)
	if err != nil {
		return api.StatusView{}, err
	}
	leases, err := n.Leases(ctx)
	if err != nil {
		return api.StatusView{}, err
	}
	settle, err := n.Settle(ctx, "")
	if err != nil {
		return api.StatusView{}, err
	}
	view.Status(&v, n.Published(), orders, leases, settle)
	return v, nil
}
