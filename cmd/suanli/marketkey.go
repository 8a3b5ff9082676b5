package main

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/suanli/suanli/market"
	"github.com/suanli/suanli/node/api"
	"github.com/suanli/suanli/node/client"
)

// resolveMarket turns what the user typed for a market into its key. A
// full key (nvidia-h100-sxm5-80gb) stands as typed, whether or not anyone
// offers it yet; anything else is a search word that must name exactly one
// market among the offers the node finds, as `offers --gpu` matches it
// (h100 → nvidia-h100-sxm5-80gb). No match, or several, is a usage error
// that lists what there is.
func resolveMarket(ctx context.Context, c *client.Client, typed string) (string, error) {
	if market.IsFullMarketKey(typed) {
		return typed, nil
	}
	offers, err := c.Offers(ctx, api.OfferQuery{GPU: typed})
	if err != nil {
		return "", fmt.Errorf("resolving market %q: %w", typed, err)
	}
	want := strings.ToLower(typed)
	var found []string
	for _, o := range offers {
		for _, g := range o.GPUs {
			if strings.Contains(g.Market, want) || strings.Contains(strings.ToLower(g.Name), want) {
				found = append(found, g.Market)
			}
		}
	}
	slices.Sort(found)
	found = slices.Compact(found)
	switch len(found) {
	case 1:
		return found[0], nil
	case 0:
		return "", fmt.Errorf("%w: no offer this node knows is in a market matching %q: give a full market key like nvidia-h100-sxm5-80gb ('suanli offers' lists them)", errUsage, typed)
	}
	return "", fmt.Errorf("%w: %q matches %d markets, give one: %s", errUsage, typed, len(found), strings.Join(found, ", "))
}
