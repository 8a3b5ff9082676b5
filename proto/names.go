package proto

import (
	"errors"
	"fmt"
	"strings"

	"github.com/ipfs/go-cid"
	"github.com/libp2p/go-libp2p/core/peer"
	mh "github.com/multiformats/go-multihash"
)

// OfferNamespace is the DHT namespace of offer records.
const OfferNamespace = "suanli-offer"

// ErrBadKey is returned when a DHT key is not /suanli-offer/<peer-id>.
var ErrBadKey = errors.New("proto: bad offer key")

// CIDOf names bytes (usually a sealed envelope) by CIDv1, raw codec, sha2-256.
func CIDOf(b []byte) cid.Cid {
	sum, err := mh.Sum(b, mh.SHA2_256, -1)
	if err != nil {
		panic(err) // sha2-256 is always available
	}
	return cid.NewCidV1(cid.Raw, sum)
}

// MarketCID is the DHT provider-record key of a market such as
// "nvidia-h100-sxm5-80gb": providers Provide it, buyers look it up.
func MarketCID(market string) cid.Cid {
	return CIDOf([]byte("/suanli/market/" + market))
}

// OfferKey is the DHT key of a provider's offer: /suanli-offer/ followed by
// the raw bytes of its peer ID, as IPNS does.
func OfferKey(p peer.ID) string {
	return "/" + OfferNamespace + "/" + string(p)
}

// ParseOfferKey returns the peer ID named by an offer key.
func ParseOfferKey(key string) (peer.ID, error) {
	rest, ok := strings.CutPrefix(key, "/"+OfferNamespace+"/")
	if !ok {
		return "", fmt.Errorf("%w: %q lacks /%s/", ErrBadKey, key, OfferNamespace)
	}
	p, err := peer.IDFromBytes([]byte(rest))
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrBadKey, err)
	}
	return p, nil
}
