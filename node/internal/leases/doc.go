// Package leases holds the durable side of a node's leases: the record
// each party keeps of a lease beside its signed terms, the receipt
// chains and their verification (online against the store, offline from
// an export), and the settlement ledger built from countersigned
// receipts and payment acknowledgements.
//
// It knows the store and the signed objects, not the network: the node's
// lease loop (metering, billing, the receipt and exec protocols) runs a
// lease and calls here to keep and check what it signed and received.
package leases
