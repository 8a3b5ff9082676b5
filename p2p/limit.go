package p2p

import "golang.org/x/time/rate"

// AllowIn spends one token of key's limiter in m, made at r and burst on
// first use: a per-peer (or per-author) rate for a request that costs the
// asker nothing. A map past 100,000 keys starts over, so fresh keys cannot
// grow it without bound (a forgotten key gets a full bucket again). The
// caller serializes access to m.
func AllowIn[K comparable](m map[K]*rate.Limiter, key K, r rate.Limit, burst int) bool {
	l, ok := m[key]
	if !ok {
		if len(m) > 100_000 {
			clear(m)
		}
		l = rate.NewLimiter(r, burst)
		m[key] = l
	}
	return l.Allow()
}
