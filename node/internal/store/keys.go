package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// Every Badger key the node writes is built here. BE is a big-endian
// uint64, so that keys under one prefix iterate in number order.
//
//	seq/offer                              last offer seq this node published (BE)
//	offer/<peer>                           last valid sealed offer seen from a provider
//	fill/<unix-ms BE>/<fill id>            a doubly-signed fill (proto.Fill)
//	lease/<lease id>                       a lease this node is party to (proto.Lease), synced
//	answer/<take id>                       a maker's accept of a take (proto.TradeReply), with the lease, or a holder's resale reply, with the sale, synced
//	gpu/<uuid>                             a current hold: end (unix ms BE) + lease or take id, synced
//	cal/<uuid>/<start BE>/<lease id>       a forward block of a GPU: end (unix ms BE), synced
//	leasestate/<lease id>                  the lease's own record (JSON, node's leaseRecord), synced
//	receipt/<lease id>/<seq BE>            proto.SignedReceipt, countersigned or not yet, synced
//	evidence/<lease id>/<seq BE>           proto.ReceiptChain: two receipts signed with one seq, synced
//	fillevidence/<fill id>                 a refused doubly-signed fill and why (JSON), synced
//	payment/<provider>/<buyer>/<seq BE>    a sealed proto.PaymentAck, synced
//	logs/<lease id>/<seq BE>               one output chunk: kind byte ('o', 'e') + data
//	attest/<peer>                          the last attestation verdict on a provider (JSON)
//	hist/<market>/<currency>/<unix-ms BE>/<fill id>   one price history point
//	handover/<lease id>                    a provider's handover of a resold lease (proto.ResaleReply), synced
//	<key of the premium record>            proto.SignedPremium of a resale (see node/internal/resale), synced
//
// Peers are their raw ID bytes in offer/ and attest/, their string form
// in payment/.
const (
	prefixOffer        = "offer/"
	prefixFill         = "fill/"
	prefixLease        = "lease/"
	prefixGPU          = "gpu/"
	prefixCal          = "cal/"
	prefixLeaseState   = "leasestate/"
	prefixReceipt      = "receipt/"
	prefixEvidence     = "evidence/"
	prefixFillEvidence = "fillevidence/"
	prefixPayment      = "payment/"
	prefixLogs         = "logs/"
	prefixAttest       = "attest/"
	prefixHist         = "hist/"
	prefixAnswer       = "answer/"
)

var keyOfferSeq = []byte("seq/offer")

func offerKey(p peer.ID) []byte { return append([]byte(prefixOffer), p...) }

func fillKey(at time.Time, id string) []byte {
	k := binary.BigEndian.AppendUint64([]byte(prefixFill), uint64(at.UnixMilli()))
	return append(append(k, '/'), id...)
}

func leaseKey(id string) []byte       { return []byte(prefixLease + id) }
func handoverKey(lease string) []byte { return []byte("handover/" + lease) }
func gpuKey(uuid string) []byte       { return []byte(prefixGPU + uuid) }
func leaseStateKey(id string) []byte  { return []byte(prefixLeaseState + id) }

func calPrefix(uuid string) []byte { return []byte(prefixCal + uuid + "/") }

func calKey(uuid string, start int64, lease string) []byte {
	k := binary.BigEndian.AppendUint64(calPrefix(uuid), uint64(start))
	return append(append(k, '/'), lease...)
}

// decodeCalKey splits a calendar key, the prefix cal/ cut off, into the
// GPU, the block's start and its lease.
func decodeCalKey(k []byte) (uuid string, start int64, lease string, ok bool) {
	i := bytes.LastIndexByte(k, '/')
	// k = uuid / start(8) / lease: the start sits just before the last '/'.
	if i < 9 || k[i-9] != '/' {
		return "", 0, "", false
	}
	return string(k[:i-9]), int64(binary.BigEndian.Uint64(k[i-8 : i])), string(k[i+1:]), true
}

func seqKey(prefix, id string, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(prefix+id+"/"), seq)
}

func receiptPrefix(id string) string           { return prefixReceipt + id + "/" }
func receiptKey(id string, seq uint64) []byte  { return seqKey(prefixReceipt, id, seq) }
func evidencePrefix(id string) string          { return prefixEvidence + id + "/" }
func evidenceKey(id string, seq uint64) []byte { return seqKey(prefixEvidence, id, seq) }
func logPrefix(id string) string               { return prefixLogs + id + "/" }
func logKey(id string, seq uint64) []byte      { return seqKey(prefixLogs, id, seq) }
func fillEvidenceKey(id string) []byte         { return []byte(prefixFillEvidence + id) }
func attestKey(p peer.ID) []byte               { return append([]byte(prefixAttest), p...) }

func paymentPrefix(provider, buyer peer.ID) string {
	return prefixPayment + provider.String() + "/" + buyer.String() + "/"
}

func paymentKey(provider, buyer peer.ID, seq uint64) []byte {
	return binary.BigEndian.AppendUint64([]byte(paymentPrefix(provider, buyer)), seq)
}

// HistPrefix is the prefix of a market's price history in a currency.
func HistPrefix(mkt, cur string) []byte { return []byte(prefixHist + mkt + "/" + cur + "/") }

// HistKey is the key of one price history point.
func HistKey(mkt, cur string, at time.Time, fill string) []byte {
	k := binary.BigEndian.AppendUint64(HistPrefix(mkt, cur), uint64(at.UnixMilli()))
	return append(append(k, '/'), fill...)
}

// ErrCorrupt is returned for a stored key or value that does not decode.
var ErrCorrupt = errors.New("store: corrupt entry")

// DecodeHistKey splits a history key under prefix into time and fill ID.
func DecodeHistKey(prefix, k []byte) (time.Time, string, error) {
	rest, ok := bytes.CutPrefix(k, prefix)
	if !ok || len(rest) < 9 || rest[8] != '/' {
		return time.Time{}, "", fmt.Errorf("%w: history key %q", ErrCorrupt, k)
	}
	ms := int64(binary.BigEndian.Uint64(rest))
	if ms < 0 {
		return time.Time{}, "", fmt.Errorf("%w: history key time %d", ErrCorrupt, ms)
	}
	return time.UnixMilli(ms).UTC(), string(rest[9:]), nil
}

// reservation is the value of a gpu/ hold: end (unix ms BE), then the lease.
func reservation(end time.Time, lease string) []byte {
	return append(binary.BigEndian.AppendUint64(nil, uint64(end.UnixMilli())), lease...)
}

func decodeReservation(v []byte) (lease string, until int64) {
	if len(v) < 8 {
		return "", 0
	}
	return string(v[8:]), int64(binary.BigEndian.Uint64(v[:8]))
}
