package node

import (
	"context"
	"slices"
	"strings"

	"github.com/suanli/suanli/node/api"
)

// Dashboard page sizes of OrdersPage.
const (
	defaultPageSize = 50
	maxPageSize     = 500
)

// OrdersPage implements DashboardAPI.
func (n *Node) OrdersPage(ctx context.Context, q api.PageQuery) (_ api.OrdersPageView, err error) {
	defer classified(&err)
	switch q.Status {
	case "", "resting", "filled", "cancelled", "expired", "done":
	default:
		return api.OrdersPageView{}, api.BadRequest("status %q: want resting, filled, cancelled, expired or done", q.Status)
	}
	if q.Offset < 0 {
		return api.OrdersPageView{}, api.BadRequest("offset must not be negative")
	}
	limit := q.Limit
	switch {
	case limit < 0:
		return api.OrdersPageView{}, api.BadRequest("limit must not be negative")
	case limit == 0:
		limit = defaultPageSize
	case limit > maxPageSize:
		limit = maxPageSize
	}
	// Sort the records first and build views only for the page.
	n.ownMu.Lock()
	list := make([]*ownOrder, 0, len(n.own))
	for _, oo := range n.own {
		list = append(list, oo)
	}
	n.ownMu.Unlock()
	sortOwn(list)
	v := api.OrdersPageView{Offset: q.Offset, Orders: []api.OrderView{}}
	for _, oo := range list {
		if q.Status != "" {
			// Status may depend on the book (expired); views are cheap
			// enough for a filter over thousands.
			if n.orderView(oo).Status != q.Status {
				continue
			}
		}
		if v.Total >= q.Offset && len(v.Orders) < limit {
			v.Orders = append(v.Orders, n.orderView(oo))
		}
		v.Total++
	}
	return v, nil
}

// sortOwn orders records newest first, ties by ID, as Orders does.
func sortOwn(list []*ownOrder) {
	slices.SortFunc(list, func(a, b *ownOrder) int {
		if c := b.order.Created.Compare(a.order.Created); c != 0 {
			return c
		}
		return strings.Compare(a.order.ID, b.order.ID)
	})
}
