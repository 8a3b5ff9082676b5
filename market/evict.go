package market

// MaxRestingOrders is how many orders one replica of a book (one market,
// one currency) keeps resting by default. Anyone can make keys and sign
// orders, so without a cap a flood of long-lived orders from fresh keys
// would fill every replica's memory and every sync answer.
const MaxRestingOrders = 10_000

// Evictee is the order a book holding more than limit orders drops, by a
// rule every replica can apply on its own:
//
//   - The side of the order that just arrived gives up one, unless it
//     holds fewer than half the limit: then the other side does. Neither
//     side can crowd the other out.
//   - That side drops its last order in priority: the worst price, and at
//     one price the latest to arrive. An arrival that ranks last is itself
//     dropped, so a full book admits only orders better than what it
//     holds, and an order that got in by price and time stays until
//     taken, cancelled or expired.
//   - Orders for which keep is true (a node's own) are never dropped; a
//     side with nothing else gives up nothing.
//
// ok is false when the book holds no more than limit orders or nothing
// may be dropped.
func Evictee(b *Book, limit int, arrived Side, keep func(Order) bool) (victim Order, ok bool) {
	if b.Len() <= limit {
		return Order{}, false
	}
	other := Ask
	if arrived == Ask {
		other = Bid
	}
	count := 0
	for range b.Orders(arrived) {
		count++
	}
	sides := []Side{arrived, other}
	if 2*count < limit {
		sides = []Side{other, arrived}
	}
	for _, s := range sides {
		for o := range b.Orders(s) {
			if keep == nil || !keep(o) {
				victim, ok = o, true // the last such in priority order
			}
		}
		if ok {
			return victim, true
		}
	}
	return Order{}, false
}
