package api

import "context"

type readOnlyKey struct{}

// WithReadOnly marks ctx as carrying a request made with a read-only token.
// The local API server sets it; a node serving such a request answers from
// what it already holds and takes no action on the network: it contacts no
// peer, joins no market and starts no DHT lookup (see ReadOnly).
func WithReadOnly(ctx context.Context) context.Context {
	return context.WithValue(ctx, readOnlyKey{}, true)
}

// ReadOnly reports whether ctx carries a read-only request. A view that
// would have to reach the network to answer one refuses it with
// ErrReadOnlyNetwork, or answers from its cache where it has one.
func ReadOnly(ctx context.Context) bool {
	v, _ := ctx.Value(readOnlyKey{}).(bool)
	return v
}

// ErrReadOnlyNetwork is returned (with code forbidden) when a read-only
// request would need a network action: joining a market, or challenging a
// provider.
var ErrReadOnlyNetwork = &Error{Code: CodeForbidden, Message: "a read-only token cannot make the node act on the network"}
