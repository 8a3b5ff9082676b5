package node

import (
	"context"
	"errors"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/p2p"
)

// codes gives the errors of the layers below the API their API code. An
// API method's error is classified once, on its way out (see classify), so
// that errors.Is(err, api.ErrX) holds in-process as it does through a
// client, and errors.Is(err, market.ErrX) still holds in-process.
var codes = []struct {
	err  error
	code api.Code
}{
	{context.DeadlineExceeded, api.CodeTimeout},
	{context.Canceled, api.CodeTimeout},
	{market.ErrCreditLimit, api.CodeCreditLimit},
	{market.ErrBadTransition, api.CodeLeaseState},
	{market.ErrNotResting, api.CodeBadRequest},
	{market.ErrWouldCross, api.CodeBadRequest},
	{market.ErrDuplicateKey, api.CodeBadRequest},
	{market.ErrUnknownCurrency, api.CodeBadRequest},
	{market.ErrBadAmount, api.CodeBadRequest},
	{market.ErrSchedule, api.CodeBadRequest},
	{market.ErrOrderSchema, api.CodeBadRequest},
	{market.ErrOrderSide, api.CodeBadRequest},
	{market.ErrOrderQuantity, api.CodeBadRequest},
	{market.ErrOrderPrice, api.CodeBadRequest},
	{market.ErrOrderMarket, api.CodeBadRequest},
	{market.ErrOrderExpired, api.CodeBadRequest},
	{market.ErrOrderFarFuture, api.CodeBadRequest},
	{market.ErrOrderFromFuture, api.CodeBadRequest},
	{market.ErrOrderDuration, api.CodeBadRequest},
	{market.ErrOrderStart, api.CodeBadRequest},
	{market.ErrOrderLeaseType, api.CodeBadRequest},
	{market.ErrOrderFlags, api.CodeBadRequest},
	{market.ErrOrderConstraints, api.CodeBadRequest},
	{market.ErrPayment, api.CodeBadRequest},
	{market.ErrLedgerParty, api.CodeBadRequest},
	{market.ErrLedgerConflict, api.CodeLeaseState},
	{p2p.ErrNoReply, api.CodeUnreachable},
	{p2p.ErrAttestUnreachable, api.CodeUnreachable},
	{p2p.ErrNoBootstrap, api.CodeUnreachable},
}

// classify gives err its API code: the one it has, else the first of codes
// it wraps, else CodeInternal. The message and the cause stay.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var e *api.Error
	if errors.As(err, &e) {
		return err
	}
	for _, c := range codes {
		if errors.Is(err, c.err) {
			return api.Wrap(c.code, err)
		}
	}
	return api.Wrap(api.CodeInternal, err)
}

// classified is deferred by every API method: its error leaves classified.
func classified(err *error) { *err = classify(*err) }
