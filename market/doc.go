// Package market is Suanli's pure domain: money, offers and their filters,
// orders, the order book and matching, spot price and index. It does no I/O,
// starts no goroutines and reads no clock: callers pass `now`.
package market
