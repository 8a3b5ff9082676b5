package market

import (
	"cmp"
	"fmt"
	"slices"
	"time"

	"github.com/suanli/suanli/proto"
)

// An offer lists every GPU of its provider; the ones a lease holds carry
// the lease's end (GPU.leased_until_unix_ms). These functions turn that into
// what a buyer wants to know: how many are free now, and when the others
// free up. All take the time as an argument.

// MarkLeased sets each GPU's LeasedUntilUnixMs from holds, the end of the
// lease holding it by GPU UUID: a hold that ends after now marks the GPU
// (clamped to now + MaxLeaseDuration, the furthest any lease may run, so
// the offer stays valid); any other GPU is marked free (0).
func MarkLeased(gpus []*proto.GPU, holds map[string]time.Time, now time.Time) {
	limit := now.Add(MaxLeaseDuration).UnixMilli()
	for _, g := range gpus {
		g.LeasedUntilUnixMs = 0
		if until, ok := holds[g.Uuid]; ok && until.After(now) {
			g.LeasedUntilUnixMs = min(until.UnixMilli(), limit)
		}
	}
}

// GPUFree reports whether g is free at now: not leased, or its lease has
// ended by now.
func GPUFree(g *proto.GPU, now time.Time) bool {
	return g.GetLeasedUntilUnixMs() <= now.UnixMilli()
}

// Release is a number of GPUs that free up at one time.
type Release struct {
	At    time.Time
	Count int
}

// Capacity is an offer's GPUs in one market: how many there are, how many
// are free at the time asked, and when the leased ones free up (soonest
// first). Free plus the releases' counts is Total.
type Capacity struct {
	Market   string
	Total    int
	Free     int
	Releases []Release
}

// OfferCapacity is the capacity of an offer at now, per market in key
// order. A GPU whose lease ended by now counts as free, though the offer
// was signed while it was leased.
func OfferCapacity(o *proto.Offer, now time.Time) []Capacity {
	return capacity(o.GetGpus(), func(*proto.GPU) bool { return true }, now)
}

// FreeGPUs counts the offer's GPUs passing the filter's GPU and memory
// filters (as MatchingGPUs) that are free at now.
func (f OfferFilter) FreeGPUs(o *proto.Offer, now time.Time) int {
	n := 0
	for _, c := range capacity(o.GetGpus(), f.gpuMatches, now) {
		n += c.Free
	}
	return n
}

// MatchingCapacity is the capacity of the offer's GPUs passing the filter's
// GPU and memory filters, at now.
func (f OfferFilter) MatchingCapacity(o *proto.Offer, now time.Time) []Capacity {
	return capacity(o.GetGpus(), f.gpuMatches, now)
}

func capacity(gpus []*proto.GPU, keep func(*proto.GPU) bool, now time.Time) []Capacity {
	byMarket := map[string]*Capacity{}
	var out []*Capacity
	for _, g := range gpus {
		if !keep(g) {
			continue
		}
		c := byMarket[g.Market]
		if c == nil {
			c = &Capacity{Market: g.Market}
			byMarket[g.Market] = c
			out = append(out, c)
		}
		c.Total++
		if GPUFree(g, now) {
			c.Free++
			continue
		}
		at := time.UnixMilli(g.LeasedUntilUnixMs).UTC()
		if i := slices.IndexFunc(c.Releases, func(r Release) bool { return r.At.Equal(at) }); i >= 0 {
			c.Releases[i].Count++
		} else {
			c.Releases = append(c.Releases, Release{At: at, Count: 1})
		}
	}
	res := make([]Capacity, 0, len(out))
	for _, c := range out {
		slices.SortFunc(c.Releases, func(a, b Release) int { return a.At.Compare(b.At) })
		res = append(res, *c)
	}
	slices.SortFunc(res, func(a, b Capacity) int { return cmp.Compare(a.Market, b.Market) })
	return res
}

// validateLeasedUntil is ValidateOffer's check of one GPU's lease end: 0,
// or after the offer's creation and no further than MaxLeaseDuration past
// it (no lease runs longer).
func validateLeasedUntil(i int, g *proto.GPU, createdMs int64) error {
	u := g.LeasedUntilUnixMs
	switch {
	case u == 0:
		return nil
	case u < 0:
		return fmt.Errorf("%w: GPU %d: leased until %d", ErrOfferSchema, i, u)
	case u <= createdMs:
		return fmt.Errorf("%w: GPU %d: leased until %d, not after the offer's creation at %d", ErrOfferSchema, i, u, createdMs)
	case u-createdMs > MaxLeaseDuration.Milliseconds():
		return fmt.Errorf("%w: GPU %d: leased until %s past the offer's creation, limit %s", ErrOfferSchema, i,
			time.Duration(u-createdMs)*time.Millisecond, MaxLeaseDuration)
	}
	return nil
}
