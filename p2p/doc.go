// Package p2p is Suanli's networking: the libp2p host, the private Kademlia
// DHT with its offer-record validator, the order-book gossip and its
// validation, and the point-to-point protocols.
//
// Files: host.go (libp2p host with resource and connection limits);
// envelope.go (Seal and Open of any signed kind); offer.go (signed offers
// and the DHT record validator); dht.go (the DHT: publishing and finding
// offers, market providers); book.go (gossipsub setup and peer scoring,
// decoding and verifying book messages: orders, cancels, fills);
// streams.go (/suanli/trade/1.0.0 and /suanli/book-sync/2.0.0);
// offerstream.go (/suanli/offer/1.0.0: a provider's own offer, asked
// directly while the DHT's value search runs); attest.go
// (/suanli/attest/1.0.0 challenges).
package p2p
