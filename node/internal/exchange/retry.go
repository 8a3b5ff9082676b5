package exchange

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/suanli/suanli/p2p"
)

// errBadPulledOffer: the offer an ask's digest names does not back it.
var errBadPulledOffer = errors.New("exchange: the offer the ask's digest names does not back it")

// Retries of asks whose provider's offer could not be found when they
// arrived (not yet published where this node looked, or the lookup timed
// out): a transient failure is retried with backoff until the ask
// expires, never turned into a refusal for good.
const (
	// maxRetries bounds the asks waiting; past it one is dropped (counted
	// retry-full): the next sync or reconciliation brings it again.
	maxRetries = 4096
	// retryFirst is the first wait; each failure doubles it up to
	// retryMax.
	retryFirst = 500 * time.Millisecond
	retryMax   = 30 * time.Second
	// retryTick is how often due retries are looked for, retryBatch how
	// many run at once.
	retryTick  = 250 * time.Millisecond
	retryBatch = 4
)

type retry struct {
	ev   *p2p.BookEvent
	from peer.ID // the peer that relayed it, if gossiped: asked for its offer again, then the maker
	wait time.Duration
	next time.Time
}

// deferAsk queues an ask whose offer is not known yet for a retry; from
// is the peer that relayed it (none for one that came by sync).
func (b *Books) deferAsk(ev *p2p.BookEvent, from peer.ID) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.retries[ev.Order.ID]; ok {
		return
	}
	if len(b.retries) >= maxRetries {
		b.reject("book", "retry-full")
		return
	}
	b.retries[ev.Order.ID] = &retry{ev: ev, from: from, wait: retryFirst, next: now.Add(retryFirst)}
	select {
	case b.retryNew <- struct{}{}:
	default:
	}
}

// Retrying is how many asks wait for their offer.
func (b *Books) Retrying() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.retries)
}

// retryLoop runs the due retries until the Books' context ends. With no
// ask waiting it sleeps until one is queued: a ticker that runs idle in
// every node costs little in one daemon, but 1,000 simulated nodes in one
// process woke 4,000 times a second for nothing.
func (b *Books) retryLoop() {
	defer b.wg.Done()
	t := time.NewTicker(retryTick)
	defer t.Stop()
	for {
		if b.Retrying() == 0 {
			select {
			case <-b.ctx.Done():
				return
			case <-b.retryNew:
			}
			t.Reset(retryTick)
		}
		select {
		case <-b.ctx.Done():
			return
		case <-t.C:
			b.retryDue()
		}
	}
}

// retryDue checks again up to retryBatch due asks, at once: one the offer
// now backs is applied; one still unknown waits twice as long; one the
// offer refuses is counted offer-mismatch; one that expired is dropped
// (counted offer-unknown-expired).
func (b *Books) retryDue() {
	now := time.Now()
	clock := b.cfg.Now()
	var due []*retry
	b.mu.Lock()
	for id, r := range b.retries {
		switch {
		case !r.ev.Order.Expires.After(clock):
			delete(b.retries, id)
			b.reject("book", "offer-unknown-expired")
		case !r.next.After(now) && len(due) < retryBatch:
			delete(b.retries, id)
			due = append(due, r)
		}
	}
	b.mu.Unlock()
	var wg sync.WaitGroup
	for _, r := range due {
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.retryOne(r)
		}()
	}
	wg.Wait()
}

func (b *Books) retryOne(r *retry) {
	o := r.ev.Order
	if _, _, held := b.Lookup(o.Market, o.Currency, o.ID); held {
		return // it came again, with its offer
	}
	ctx, cancel := context.WithTimeout(b.ctx, OfferFetchTimeout)
	var err error
	maker, _ := peer.Decode(o.Maker)
	if !b.pullOffer(ctx, r.ev, r.from, maker) { // the relay again, then the maker
		err = errBadPulledOffer
	} else {
		err = b.cfg.Hooks.CheckAsk(askContext(ctx, o), o, r.ev.OrderProto)
	}
	cancel()
	switch {
	case err == nil:
		b.Apply(o.Market, r.ev)
	case errors.Is(err, ErrOfferUnknown):
		if b.ctx.Err() != nil {
			return
		}
		r.wait = min(2*r.wait, retryMax)
		r.next = time.Now().Add(r.wait)
		b.mu.Lock()
		if _, ok := b.retries[o.ID]; !ok && len(b.retries) < maxRetries {
			b.retries[o.ID] = r
		}
		b.mu.Unlock()
	default:
		b.reject("book", "offer-mismatch")
		b.cfg.Log.Debug("ask refused on retry", "order", o.ID, "err", err)
	}
}
