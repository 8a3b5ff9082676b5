package trade

import "sync"

// Inflight counts the GPUs of a node's own orders that takes not yet
// settled may still sell, as taker or maker, so that a concurrent take
// cannot oversell an order. The zero value is ready; it is safe for
// concurrent use.
//
// A take's count ends the moment its fill is applied (the node calls Done
// with the lease ID, which is the take ID, under the books lock), not when
// the code that made the take returns: the book's remaining quantity and
// this count change in one step, so a take already applied is never
// counted twice ("order has 4 GPUs left (6 being taken)"). Read it
// together with the book, under the books lock.
//
// Its lock is a leaf: nothing else is locked or called while it is held.
type Inflight struct {
	mu     sync.Mutex
	orders map[string]uint32      // order ID → GPUs in takes in flight
	takes  map[string]pendingTake // by key
	alias  map[string]string      // take ID → key, once named
}

type pendingTake struct {
	order string
	qty   uint32
	take  string // its take ID, once known
}

// Add counts qty GPUs of order in a take in flight under key, which Done
// ends.
func (f *Inflight) Add(key, order string, qty uint32) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.takes == nil {
		f.orders, f.takes, f.alias = map[string]uint32{}, map[string]pendingTake{}, map[string]string{}
	}
	if _, ok := f.takes[key]; ok {
		return
	}
	f.takes[key] = pendingTake{order: order, qty: qty}
	f.orders[order] += qty
}

// Name tells the take's ID, once known: its fill ends the count too.
func (f *Inflight) Name(key, takeID string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.takes[key]; ok && key != takeID {
		p.take = takeID
		f.takes[key] = p
		f.alias[takeID] = key
	}
}

// Done ends the count of the take under key or take ID id; a count
// already ended is left alone.
func (f *Inflight) Done(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	key := id
	if k, ok := f.alias[id]; ok {
		key = k
	}
	p, ok := f.takes[key]
	if !ok {
		return
	}
	delete(f.takes, key)
	if p.take != "" {
		delete(f.alias, p.take)
	}
	if f.orders[p.order] -= min(p.qty, f.orders[p.order]); f.orders[p.order] == 0 {
		delete(f.orders, p.order)
	}
}

// Of is how many GPUs of order are in takes in flight.
func (f *Inflight) Of(order string) uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.orders[order]
}

// Len is how many takes are counted.
func (f *Inflight) Len() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.takes)
}
