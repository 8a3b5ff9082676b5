// Package p2p is Suanli's networking: the libp2p host, the private Kademlia
// DHT with its offer-record validator, and offer publication and discovery.
//
// Files: host.go (libp2p host with resource and connection limits);
// offer.go (sealing, opening and validating signed offer envelopes; the DHT
// record validator); dht.go (the DHT, publishing and finding offers).
package p2p
